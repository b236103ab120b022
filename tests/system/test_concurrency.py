"""Concurrency through the HTTP API of a live gunicorn, on the test database.

* Client processes writing overlapping content: one row and one id per text.
* Writers keep writing into both buckets of a bucket merge while it runs: no write
  lost, none duplicated, no orphan, a write to a removed source is a clean 404.
* Concurrent PATCHes of one memory: no lost update, derived columns match the content.

(Writes and searches during ``reindex_hnsw``: tests/maintenance/test_maintenance_reindex.py.
Concurrent writers through the service function: tests/memories/test_dedup_race.py.)
The server is started and stopped here, by its PID (tests.support.web_server).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
from django.db import connection

from audit.models import AuditEvent
from memories.models import Memory
from memories.services import MemoryInput, memories_ingest
from memories.services import buckets as memory_buckets
from memories.services.buckets import bucket_create
from memories.text import text_hash
from tenants import services as tenant_services
from tenants.models import Bucket
from tests.scripts.http_writer import call
from tests.support import ROOT, StartLine, base_env, test_database_url, wait_for, web_server

pytestmark = pytest.mark.django_db(transaction=True)


def server_env(**extra: str) -> dict[str, str]:
    # The server shares the test database; the rate limit is not what is tested here.
    return base_env(DATABASE_URL=test_database_url(), ENGRAM_TOKEN_RATE="100000/min", **extra)


def secret(tenant, scopes=("read", "write")) -> str:
    return tenant_services.token_issue(tenant=tenant, name="concurrency", scopes=list(scopes)).secret


class Server:
    def __init__(self, base: str, log: Path):
        self.base, self.log = base, log
        self._seen = 0

    def errors(self) -> str:
        """Tracebacks the server logged since the last call (an unhandled exception is a
        bug even when the client got an answer)."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        new, self._seen = text[self._seen :], len(text)
        return new[new.find("Traceback") :] if "Traceback" in new else ""


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory):
    """A gunicorn (two processes, four threads each) on the test database, without the
    embedding model (the invariants tested with it do not depend on vectors)."""
    log = tmp_path_factory.mktemp("server") / "server.log"
    with web_server(server_env(ENGRAM_EMBEDDINGS="off"), workers=2, log=log) as base:
        # Let both server processes load the lemmatizer before any test's clients collide.
        with django_db_blocker.unblock():
            warm = tenant_services.tenant_create(name="Warm-up")
            bucket = bucket_create(tenant=warm, name="warm-up")
            url, token = f"{base}/api/v1/buckets/{bucket.pk}/memories", secret(warm)
            threads = [threading.Thread(target=call, args=("POST", url, token, {"content": f"w{i}"})) for i in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            warm.delete()
        server = Server(base, log)
        server.errors()
        yield server


def orphans() -> dict[str, int]:
    """Rows, in any table with a bucket_id column, whose bucket does not exist."""
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT c.table_name FROM information_schema.columns c
            JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
            WHERE c.table_schema = current_schema() AND c.column_name = 'bucket_id' AND t.table_type = 'BASE TABLE'
              AND c.table_name <> 'buckets'
            """
        )
        found = {}
        for (table,) in cur.fetchall():
            cur.execute(
                f'SELECT count(*) FROM "{table}" x WHERE x.bucket_id IS NOT NULL '
                "AND NOT EXISTS (SELECT 1 FROM buckets b WHERE b.id = x.bucket_id)"
            )
            if count := cur.fetchone()[0]:
                found[table] = count
    return found


# --- dedup across processes ------------------------------------------------------------------


def spellings(text: str) -> list[str]:
    """Ways to write ``text`` that normalise to the same hash (case, punctuation, spaces)."""
    return [text, text.upper(), f"  {text}!! ", text.replace(":", " -")]


@pytest.mark.slow
def test_processes_writing_overlapping_content_over_http_get_one_row_and_one_id_per_text(
    server, tenant, bucket, tmp_path
):
    facts = [f"Shared fact {i}: the standup moved to room {i % 5}" for i in range(24)]
    token = secret(tenant)
    clients = 5
    base = server.base
    start_line = StartLine(tmp_path / "start")
    procs = []
    for n in range(clients):
        rng = random.Random(n)
        # Each client writes every fact in its own spelling; the last one writes each
        # fact twice (two spellings), so batches hold duplicates of their own too.
        contents = [spellings(f)[n % 4] for f in facts]
        if n == clients - 1:
            contents += [spellings(f)[(n + 1) % 4] for f in facts]
        rng.shuffle(contents)
        batch = 1 if n < 2 else 6  # single memory objects and batches, side by side
        args = [base, token, str(bucket.pk), str(start_line.folder), str(batch), *contents]
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "tests.scripts.http_writer", *args],
                cwd=ROOT,
                env=base_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    start_line.go_when_ready(clients, procs=procs)
    lines = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        lines += [json.loads(line) for line in out.splitlines()]

    assert server.errors() == ""
    assert len(lines) == len(facts) * (clients + 1)
    assert {line["status"] for line in lines} == {201}, Counter(line["status"] for line in lines)
    rows = Memory.objects.filter(bucket=bucket)
    assert rows.count() == len(facts)
    by_hash: dict[str, list[dict]] = defaultdict(list)
    for line in lines:
        by_hash[text_hash(line["content"])].append(line)
    assert set(by_hash) == set(rows.values_list("text_hash", flat=True))
    stored = dict(rows.values_list("text_hash", "id"))
    for digest, told in by_hash.items():
        # Every client was told the id of the one stored row...
        assert {line["id"] for line in told} == {str(stored[digest])}
        # ...and exactly one request, in one client, created it.
        assert sum(not line["deduplicated"] for line in told) == 1


# --- writes during a bucket merge ----------------------------------------------------------------


class Writer(threading.Thread):
    """Writes two memories per request into one bucket until told to stop: a text of its
    own, and a text the other bucket holds (``other(k)``): a collision for the merge."""

    def __init__(self, base: str, token: str, bucket: Bucket, label: str, other, stop: threading.Event):
        super().__init__()
        self.url = f"{base}/api/v1/buckets/{bucket.pk}/memories"
        self.token, self.label, self.other, self.stop = token, label, other, stop
        self.bucket_id = bucket.pk
        self.calls: list[dict] = []

    def run(self) -> None:
        k = 0
        while not self.stop.is_set():
            contents = [f"{self.label} note {k}: the pump on line {k % 9} was checked", self.other(k)]
            started = time.monotonic()
            status, body, _ = call("POST", self.url, self.token, {"memories": [{"content": c} for c in contents]})
            self.calls.append(
                {"contents": contents, "status": status, "body": body, "started": started, "ended": time.monotonic()}
            )
            k += 1
            self.stop.wait(0.01)  # a busy client's pace, not a synchronisation: ends at once on stop


def fill(bucket: Bucket, prefix: str, count: int) -> set[str]:
    """``count`` rows "<prefix> <n>" made in SQL (fast; enrichment is not the point here).
    The prefix is lower case without punctuation, so md5 of the content is its text_hash."""
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO memories (tenant_id, bucket_id, content, text_hash, text_lemmatized, token_count)
            SELECT %s, %s, %s || g, md5(%s || g), %s || g, 3 FROM generate_series(1, %s) AS g
            """,
            [bucket.tenant_id, bucket.pk, prefix, prefix, prefix, count],
        )
    return {text_hash(f"{prefix}{n}") for n in range(1, count + 1)}


@pytest.mark.slow
@pytest.mark.parametrize("remove_source", [True, False], ids=["source-removed", "source-kept"])
def test_writes_during_a_bucket_merge_are_neither_lost_nor_duplicated(server, tenant, remove_source):
    source = bucket_create(tenant=tenant, name="source")
    target = bucket_create(tenant=tenant, name="target")
    # Rows to move, and 40 that collide with the target's (absorbed by them). Writers write
    # these texts again in other spellings (normalised alike, so the hash is the same).
    prefilled = fill(source, "source fact ", 3000) | fill(source, "shared fact ", 40)
    fill(target, "shared fact ", 40)
    writer_token, admin_token = secret(tenant), secret(tenant, scopes=("admin",))

    stop = threading.Event()
    base = server.base
    writers = [
        # Into the source: texts the target has too (absorbed by the merge, or written after it).
        *(Writer(base, writer_token, source, f"source-{n}", lambda k: f"Shared fact {k % 40 + 1}", stop)
          for n in range(2)),
        # Into the target: texts only the source has, until the merge moves them. An insert
        # of one that is still waiting when the merge moves its twin used to deadlock with it.
        *(Writer(base, writer_token, target, f"target-{n}", lambda k, n=n: f"Source fact {1000 * n + k + 1}", stop)
          for n in range(2)),
    ]  # fmt: skip
    for writer in writers:
        writer.start()
    try:
        wait_for(lambda: all(sum(c["status"] == 201 for c in list(w.calls)) >= 3 for w in writers), timeout=60)
        merge_started = time.monotonic()
        status, merged, _ = call(
            "POST",
            f"{base}/api/v1/buckets/{source.pk}/merge",
            admin_token,
            {"target_bucket_id": str(target.pk), "remove_source": remove_source},
            timeout=240,
        )
        merge_ended = time.monotonic()
        # Writers go on after the merge (into a removed source, or a kept one): two calls each.
        wait_for(lambda: all(sum(c["started"] > merge_ended for c in list(w.calls)) >= 2 for w in writers), timeout=60)
    finally:
        stop.set()
        for writer in writers:
            writer.join(timeout=120)

    assert server.errors() == ""
    assert status == 200, merged
    assert merged["source_removed"] is remove_source and merged["moved"] + merged["deduplicated"] >= 3040
    calls = [(w, c) for w in writers for c in w.calls]
    # Some writes were in flight while the merge ran (it holds both buckets' locks).
    assert any(c["started"] < merge_ended and c["ended"] > merge_started for _, c in calls)
    for writer, c in calls:
        if writer.bucket_id == source.pk and remove_source and c["status"] == 404:
            # Only once the merge had begun, and as a clean JSON answer.
            assert c["ended"] > merge_started and c["body"]["code"] == "not_found", c
        else:
            assert c["status"] == 201, c
    if remove_source:
        assert not Bucket.objects.filter(pk=source.pk).exists()
        assert any(c["status"] == 404 for _, c in calls), "no write reached the removed source"

    buckets = [target.pk] + ([] if remove_source else [source.pk])
    rows = list(Memory.objects.filter(tenant=tenant, bucket_id__in=buckets).values("id", "bucket_id", "text_hash"))
    assert not Memory.objects.filter(tenant=tenant).exclude(bucket_id__in=buckets).exists()
    assert orphans() == {}
    if remove_source:
        assert memory_buckets._rows_left_in(Bucket(pk=source.pk)) == []
    by_id = {str(r["id"]): r for r in rows}
    where: dict[str, set] = defaultdict(set)  # text hash -> buckets holding it
    for r in rows:
        assert r["bucket_id"] not in where[r["text_hash"]], "two rows with one text in one bucket"
        where[r["text_hash"]].add(r["bucket_id"])

    event = AuditEvent.objects.get(action="bucket.merge")
    absorbed = event.details["deduplicated_into"]  # absorbed source id -> target id
    assert len(absorbed) == merged["deduplicated"] < 100  # the audit lists every absorbed id (up to 100)
    acknowledged: set[str] = set()
    for writer, c in calls:
        if c["status"] != 201:
            continue
        for content, result in zip(c["contents"], c["body"]["results"], strict=True):
            digest = text_hash(content)
            acknowledged.add(digest)
            if writer.bucket_id == target.pk or remove_source:
                # A write into the target, or into a source that is gone: it is in the target.
                assert target.pk in where[digest], content
            else:
                assert where[digest] & {source.pk, target.pk}, content
            told = result["id"]
            if told in by_id:
                assert by_id[told]["text_hash"] == digest
            else:
                # The row the client was told about was absorbed by the target's copy.
                survivor = by_id[absorbed[told]]
                assert survivor["text_hash"] == digest and survivor["bucket_id"] == target.pk
    unique = {text_hash(c["contents"][0]) for _, c in calls if c["status"] == 201}
    for digest in unique:  # a writer's own text: exactly one row in all
        assert len(where[digest]) == 1
    # Nothing that nobody acknowledged (a 404'd write left no row behind).
    assert set(where) == prefilled | acknowledged


def test_a_write_into_a_bucket_deleted_after_its_lookup_is_not_found(tenant):
    """The window the merge test hits by timing: the view looked the bucket up, then the
    bucket went away (merge with remove_source, or a delete) before the insert."""
    from engram_site.exceptions import NotFound

    stale = bucket_create(tenant=tenant, name="going")
    Bucket.objects.filter(pk=stale.pk).delete()
    with pytest.raises(NotFound, match="Bucket not found"):
        memories_ingest(bucket=stale, items=[MemoryInput(content="Too late for this bucket.")], sequence=False)
    assert not Memory.objects.filter(bucket_id=stale.pk).exists()


def test_an_edit_of_a_memory_deleted_after_its_lookup_is_not_found(tenant, bucket):
    from engram_site.exceptions import NotFound
    from memories.services import memory_update

    [result] = memories_ingest(bucket=bucket, items=[MemoryInput(content="Soon gone.")], sequence=False)
    stale = Memory.objects.get(pk=result.id)
    Memory.objects.filter(pk=result.id).delete()  # a concurrent DELETE, or absorbed by a merge
    with pytest.raises(NotFound, match="Memory not found"):
        memory_update(memory=stale, agent_id="late")
    assert not Memory.objects.filter(pk=result.id).exists()


# --- concurrent edits of one memory --------------------------------------------------------------


@pytest.mark.slow
def test_concurrent_edits_of_one_memory_lose_no_update_and_keep_derived_columns_consistent(tenant, bucket, tmp_path):
    from engram_site.providers import embedding, lemmatizer
    from memories.services import document_lemmas

    [created] = memories_ingest(bucket=bucket, items=[MemoryInput(content="The launch is on Monday.")])
    token = secret(tenant)
    rounds = 8
    # One client per field (so the value it sent in a round must be the value after the
    # round), two clients editing the content, one the time. New content recomputes the
    # lemmas with the row's date words, and a new time recomputes them from the row's
    # content: computed from a stale read of the other, they would describe another row.
    editors = {
        "agent": lambda k: {"agent_id": f"agent-{k}"},
        "run": lambda k: {"run_id": f"run-{k}"},
        "tags": lambda k: {"hint_tags": [f"tag-{k}", "edited"]},
        "metadata": lambda k: {"metadata": {"round": k}},
        "two-fields": lambda k: {"hint_root": f"root-{k}", "classified_topic": f"topic-{k}"},
        "time": lambda k: {"created_at": f"202{k % 5}-0{1 + k % 9}-1{k % 10}T08:30:00Z"},
        "content-a": lambda k: {"content": f"Alpha edit {k}: the launch is on Monday {k}"},
        "content-b": lambda k: {"content": f"Beta edit {k}: the launch moved to Friday {k}"},
    }
    # Every round, all clients send their edit at once; the test checks the row in between.
    barrier = threading.Barrier(len(editors) + 1, timeout=300)
    answers: dict[str, list] = defaultdict(list)

    def edit(name: str) -> None:
        try:
            for k in range(rounds):
                barrier.wait()
                status, body, _ = call("PATCH", f"{base}/api/v1/memories/{created.id}", token, editors[name](k))
                answers[name].append(status if status != 200 or body.get("id") == str(created.id) else body)
                barrier.wait()
        except threading.BrokenBarrierError:
            pass

    def check(k: int) -> list[str]:
        """What is wrong with the row after round ``k`` (nothing, if no update was lost)."""
        sent = {name: make(k) for name, make in editors.items()}
        m = Memory.objects.get(pk=created.id)
        problems = [
            f"{field} is {getattr(m, field)!r}, sent {value!r}"
            for name in ("agent", "run", "tags", "metadata", "two-fields")
            for field, value in sent[name].items()
            if getattr(m, field) != value
        ]
        if m.created_at.isoformat().replace("+00:00", "Z") != sent["time"]["created_at"]:
            problems.append(f"created_at is {m.created_at}, sent {sent['time']['created_at']}")
        if m.content not in {sent["content-a"]["content"], sent["content-b"]["content"]}:
            problems.append(f"content is {m.content!r}")
        if m.text_hash != text_hash(m.content):
            problems.append("text_hash is not the content's")
        if m.token_count != embedding.count_tokens([m.content])[0]:
            problems.append("token_count is not the content's")
        lemmas = document_lemmas(lemmatizer.lemmatize_many([m.content])[0], m.created_at)
        if m.text_lemmatized != lemmas:
            problems.append(f"text_lemmatized {m.text_lemmatized!r} is not {lemmas!r}")
        if m.embedding is None or float(np.dot(np.asarray(m.embedding), embedding.embed_texts([m.content])[0])) < 0.999:
            problems.append("embedding is not the content's")
        return [f"round {k}: {p}" for p in problems]

    problems: list[str] = []
    with web_server(server_env(), workers=2, log=tmp_path / "server.log") as base:
        threads = [threading.Thread(target=edit, args=(name,)) for name in editors]
        for thread in threads:
            thread.start()
        try:
            for k in range(rounds):
                barrier.wait()  # go
                barrier.wait()  # every client has its answer
                problems += check(k)
        finally:
            barrier.abort()
            for thread in threads:
                thread.join(timeout=60)
    assert Server(base, tmp_path / "server.log").errors() == ""
    assert {name: set(statuses) for name, statuses in answers.items()} == {name: {200} for name in editors}
    assert problems == []
