"""Export and import (docs/API.md, "Export and import"): GET /api/v1/buckets/{id}/export,
POST /api/v1/buckets/{id}/import and the export_bucket / import_bucket commands.

The round trip of 2,500 memories is built once for the module (committed, and removed at its
end): a bucket written through the gateway — unrelated facts, a batch sequence, runs — exported
with its vectors and imported into a fresh bucket. The other tests use small buckets of their own.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import io
import json
import random
import urllib.parse
import uuid
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import numpy as np
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import override_settings

from engram_site.providers import embedding
from memories.models import Memory, MemoryVersion
from memories.retrieval import vector
from memories.services import MemoryInput, memories_enrich_all_pending, memories_ingest, memory_update
from memories.services.buckets import bucket_create
from memories.services.ingest.context import run_sequence_id
from tenants import services as tenant_services
from tests.factories import make_client
from tests.support import base_env, test_database_url, web_server

pytestmark = pytest.mark.django_db

NDJSON = "application/x-ndjson"
# Large enough that the export streams in many chunks and the import runs many batches; each
# memory costs an insert into both HNSW indexes, which is most of this fixture's time.
MEMORIES = 2_500
# The last 600 are written in sequences: one batch of 200, then 20 runs of 20.
FACTS = MEMORIES - 600
BASE_TIME = datetime(2024, 1, 1, tzinfo=UTC)
NOW = "2026-01-01T00:00:00Z"


def export_url(bucket, **params) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"/api/v1/buckets/{bucket.pk}/export" + (f"?{query}" if query else "")


def import_url(bucket, **params) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"/api/v1/buckets/{bucket.pk}/import" + (f"?{query}" if query else "")


def export(client, bucket, **params) -> bytes:
    response = client.get(export_url(bucket, **params))
    assert response.status_code == 200, response.content
    return b"".join(response.streaming_content)


def send(client, bucket, body: bytes | str, content_type: str = NDJSON, **params):
    if isinstance(body, str):
        body = body.encode()
    return client.post(import_url(bucket, **params), data=body, content_type=content_type)


def lines(*objects) -> str:
    return "".join(json.dumps(o) + "\n" for o in objects)


def parsed(body: bytes) -> list[dict]:
    return [json.loads(line) for line in body.decode().splitlines()]


# --- the 2,500-memory round trip ------------------------------------------------------------


def _words() -> list[str]:
    """Whole words of the model's vocabulary (one token each, so the texts embed quickly), many
    enough that a query's words occur in few memories: BM25 keeps every match as a candidate."""
    path = embedding._model_path() + "/vocab.txt"
    with open(path, encoding="utf-8") as handle:
        words = sorted({w.strip() for w in handle if w.strip().isalpha() and w.strip().islower() and 5 <= len(w) < 12})
    random.Random(7).shuffle(words)
    return words[:6000]


def _corpus() -> list[tuple[MemoryInput, str | None]]:
    """(memory, how it is written): None for unrelated facts, "batch" for one batch sequence,
    else a run id."""
    rnd = random.Random(11)
    words = _words()
    out = []
    for i in range(MEMORIES):
        text = " ".join(rnd.choice(words) for _ in range(rnd.randint(3, 7))).capitalize() + "."
        item = MemoryInput(
            content=text,
            created_at=BASE_TIME + timedelta(hours=i, microseconds=i),
            attributed_to=("user", "assistant", None)[i % 3],
            agent_id=f"agent-{i % 4}" if i % 5 else None,
            source_actor_id="importer" if i % 11 == 0 else None,
            hint_root="root" if i % 13 == 0 else None,
            hint_tags=["alpha", f"t{i % 9}"] if i % 2 else None,
            metadata={"n": i, "nested": {"ok": True}} if i % 3 == 0 else None,
            importance=round((i % 10) / 9, 3) if i % 4 == 0 else None,
            # Some expired long ago, some expire in the future: exported and imported alike.
            expires_at=BASE_TIME + timedelta(days=30 + i % 1000) if i % 17 == 0 else None,
        )
        how = None if i < FACTS else "batch" if i < FACTS + 200 else f"run-{i // 20}"
        if how and how.startswith("run-"):
            item.run_id = how
        out.append((item, how))
    return out


def _build_source(bucket) -> None:
    corpus = _corpus()
    facts = [item for item, how in corpus if how is None]
    for start in range(0, len(facts), 1000):
        memories_ingest(bucket=bucket, items=facts[start : start + 1000], sequence=False)
    memories_ingest(bucket=bucket, items=[item for item, how in corpus if how == "batch"], sequence=True)
    runs: dict[str, list[MemoryInput]] = {}
    for item, how in corpus:
        if how and how.startswith("run-"):
            runs.setdefault(how, []).append(item)
    for items in runs.values():
        memories_ingest(bucket=bucket, items=items, sequence=True)
    # An operator's classification, carried by the export.
    for memory in Memory.objects.for_bucket(bucket).order_by("created_at")[:20]:
        memory_update(memory=memory, classified_scope="specific", classified_topic="travel")


@pytest.fixture(scope="module")
def round_trip(django_db_setup, django_db_blocker):
    """A 2,500-memory bucket exported with its vectors and imported into a fresh bucket."""
    with django_db_blocker.unblock():
        tenant = tenant_services.tenant_create(name="Transfer round trip")
        try:
            source = bucket_create(tenant=tenant, name="source")
            target = bucket_create(tenant=tenant, name="target")
            _build_source(source)
            client = make_client(tenant)
            response = client.get(export_url(source, embeddings="true"))
            chunks = list(response.streaming_content)
            body = b"".join(chunks)
            imported = send(client, target, body)
        except BaseException:
            tenant.delete()
            raise
    yield SimpleNamespace(
        tenant=tenant, source=source, target=target, client=client, response=response, chunks=chunks, body=body,
        imported=imported,
    )  # fmt: skip
    with django_db_blocker.unblock():
        tenant.delete()


COMPARED = (
    "content", "created_at", "attributed_to", "agent_id", "run_id", "source_actor_id", "hint_root", "hint_tags",
    "metadata", "importance", "expires_at", "context_text", "sequence_index", "classified_scope", "classified_topic",
    "token_count", "text_lemmatized", "context_lemmatized",
)  # fmt: skip


def _rows(bucket) -> list[dict]:
    columns = ("id", *COMPARED, "sequence_id")
    return list(Memory.objects.for_bucket(bucket).order_by("created_at").values(*columns))


def _same_vectors(source, target) -> int:
    """Memories of ``target`` whose vectors equal those of the ``source`` memory written at the
    same time (compared in the database: reading 8,000 vectors into Python costs seconds)."""
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT count(*) FROM memories s JOIN memories t ON t.created_at = s.created_at
            WHERE s.bucket_id = %s AND t.bucket_id = %s AND s.embedding = t.embedding
              AND s.context_embedding IS NOT DISTINCT FROM t.context_embedding
            """,
            [source.pk, target.pk],
        )
        return cur.fetchone()[0]


@pytest.mark.slow
def test_round_trip_of_2500_memories_keeps_every_field(round_trip):
    assert round_trip.imported.status_code == 200, round_trip.imported.content
    report = round_trip.imported.json()
    assert report == {
        "lines": MEMORIES, "imported": MEMORIES, "deduplicated": 0, "embeddings_reused": MEMORIES,
        "rejected_count": 0, "rejected": [], "pending_enrichment": 0, "blocks_imported": 0, "blocks_unchanged": 0,
        "feedback_imported": 0, "feedback_unchanged": 0, "feedback_skipped": 0,
    }  # fmt: skip
    source, target = _rows(round_trip.source), _rows(round_trip.target)
    assert len(source) == len(target) == MEMORIES
    assert _same_vectors(round_trip.source, round_trip.target) == MEMORIES
    sequences = set()
    for old, new in zip(source, target, strict=True):
        assert {k: old[k] for k in COMPARED} == {k: new[k] for k in COMPARED}
        assert new["id"] != old["id"]
        assert (old["sequence_id"] is None) == (new["sequence_id"] is None)
        sequences.add((old["sequence_id"], new["sequence_id"]))
        if new["run_id"]:
            # A run continues in the importing bucket under the run's id there.
            assert new["sequence_id"] == run_sequence_id(round_trip.target, new["run_id"])
    # The same grouping into sequences: one new sequence per old one.
    assert len({old for old, _ in sequences}) == len({new for _, new in sequences}) == len(sequences) == 22
    assert sum(r["context_text"] is not None for r in target) == 200 - 1 + 20 * 19
    assert sum(r["classified_topic"] == "travel" for r in target) == 20
    assert sum(r["expires_at"] is not None and r["expires_at"] < datetime.now(UTC) for r in target) > 100


QUERIES = 6


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["hybrid", "keyword", "vector"])
def test_round_trip_answers_searches_the_same(round_trip, mode, monkeypatch):
    # The two buckets' HNSW walks are approximate, each in its own way: read both exactly, so
    # that what is compared is the data the import wrote, not the index's approximation.
    monkeypatch.setattr(vector, "EXACT_SCAN_BELOW", 10**9)
    rnd = random.Random(5)
    sample = [m["content"] for m in _rows(round_trip.source)[:: MEMORIES // QUERIES]]
    queries = [" ".join(rnd.sample(text.rstrip(".").lower().split(), 2)) for text in sample]
    queries += ["what did the agent say about the weather", "dog"]
    for query in queries:
        answers = []
        for bucket in (round_trip.source, round_trip.target):
            response = round_trip.client.post(
                f"/api/v1/buckets/{bucket.pk}/search", {"query": query, "mode": mode, "now": NOW}, format="json"
            )
            assert response.status_code == 200, response.content
            assert response.json()["mode_used"] == mode
            answers.append([(hit["content"], hit["score"]) for hit in response.json()["results"]])
        source, target = answers
        assert [s for _, s in source] == [s for _, s in target], f"{mode} {query!r}"
        # Hits scoring 0 (the lowest of every list they are in) tie exactly, and retrieval leaves
        # their order, and which of them make the cut, to the database: compared by count only.
        # Every other hit is placed by its score, then by its recency (its created_at, kept).
        scored = [hit for hit in source if hit[1] > 0]
        assert scored, f"{mode} {query!r} found nothing: the comparison would prove nothing"
        assert scored == [hit for hit in target if hit[1] > 0], f"{mode} {query!r}"


@pytest.mark.slow
def test_export_streams_the_bucket_in_many_chunks(round_trip):
    response = round_trip.response
    assert response.streaming and response["Content-Type"] == NDJSON
    assert "attachment" in response["Content-Disposition"]
    # A chunk per batch of rows, never the bucket as one string.
    assert len(round_trip.chunks) >= MEMORIES // 500
    assert max(len(chunk) for chunk in round_trip.chunks) < len(round_trip.body) / 3
    first = parsed(round_trip.chunks[0])[0]
    assert set(first) == {"id", "content", "created_at", "attributed_to", "agent_id", "run_id", "source_actor_id",
                          "hint_root", "hint_tags", "metadata", "importance", "expires_at", "engram"}  # fmt: skip
    assert set(first["engram"]) == {"context", "sequence_id", "sequence_index", "run_sequence", "classified_scope",
                                    "classified_topic", "model", "embedding", "context_embedding"}  # fmt: skip
    assert first["engram"]["model"] == embedding.MODEL_NAME
    assert len(base64.b64decode(first["engram"]["embedding"])) == 384 * 4


# --- plain lines, enrichment, what is kept ---------------------------------------------------


def test_plain_content_lines_are_stored_without_vectors_and_enriched_later(api, bucket):
    body = lines({"content": "Lisbon has yellow trams."}, {"content": "Porto has a bridge by Eiffel's firm."})
    response = send(api, bucket, body)
    assert response.status_code == 200, response.content
    assert response.json() == {
        "lines": 2, "imported": 2, "deduplicated": 0, "embeddings_reused": 0, "rejected_count": 0, "rejected": [],
        "pending_enrichment": 2, "blocks_imported": 0, "blocks_unchanged": 0,
        "feedback_imported": 0, "feedback_unchanged": 0, "feedback_skipped": 0,
    }  # fmt: skip
    rows = Memory.objects.for_bucket(bucket)
    assert all(m.embedding is None and m.text_lemmatized for m in rows)  # keyword search finds them at once
    detail = api.get(f"/api/v1/buckets/{bucket.pk}").json()
    assert (detail["memory_count"], detail["pending_enrichment"]) == (2, 2)
    found = api.post(f"/api/v1/buckets/{bucket.pk}/search", {"query": "trams", "mode": "keyword"}, format="json")
    assert [h["content"] for h in found.json()["results"]] == ["Lisbon has yellow trams."]

    memories_enrich_all_pending(bucket=bucket)  # what the background sweep does

    assert api.get(f"/api/v1/buckets/{bucket.pk}").json()["pending_enrichment"] == 0
    assert all(m.embedding is not None for m in rows.all())


def test_created_at_importance_and_expiry_are_kept(api, bucket):
    body = lines(
        {"content": "An old fact.", "created_at": "2001-02-03T04:05:06.789Z", "importance": 0.25,
         "expires_at": "2002-01-01T00:00:00Z", "hint_tags": ["old"], "metadata": {"k": "v"}},
        {"content": "Due to expire.", "ttl_seconds": 3600},
    )  # fmt: skip
    assert send(api, bucket, body).json()["imported"] == 2
    old = Memory.objects.for_bucket(bucket).get(content="An old fact.")
    assert old.created_at == datetime(2001, 2, 3, 4, 5, 6, 789000, tzinfo=UTC)
    assert (old.importance, old.expires_at) == (0.25, datetime(2002, 1, 1, tzinfo=UTC))
    assert (old.hint_tags, old.metadata) == (["old"], {"k": "v"})
    soon = Memory.objects.for_bucket(bucket).get(content="Due to expire.")
    assert timedelta(minutes=59) < soon.expires_at - datetime.now(UTC) <= timedelta(hours=1)
    # ... and exported as they are (the expired one too).
    exported = {line["content"]: line for line in parsed(export(api, bucket))}
    assert exported["An old fact."]["created_at"] == "2001-02-03T04:05:06.789000Z"
    assert exported["An old fact."]["expires_at"] == "2002-01-01T00:00:00Z"
    assert exported["An old fact."]["importance"] == 0.25


def test_duplicates_within_a_file_and_against_the_bucket_are_deduplicated(api, bucket):
    memories_ingest(bucket=bucket, items=[MemoryInput(content="Already here.")])
    body = lines({"content": "already HERE"}, {"content": "New one."}, {"content": "new one!"})
    report = send(api, bucket, body).json()
    assert (report["imported"], report["deduplicated"]) == (1, 2)
    assert Memory.objects.for_bucket(bucket).count() == 2


def test_importing_an_export_again_deduplicates_every_line(api, bucket):
    memories_ingest(bucket=bucket, items=[MemoryInput(content=f"Fact number {i}.") for i in range(40)])
    body = export(api, bucket, embeddings="true")
    report = send(api, bucket, body).json()
    assert (report["lines"], report["imported"], report["deduplicated"]) == (40, 0, 40)
    assert Memory.objects.for_bucket(bucket).count() == 40


def test_an_import_keeps_history_and_runs_continue(api, bucket, tenant):
    memories_ingest(bucket=bucket, items=[MemoryInput(content=c, run_id="chat") for c in ("Hi.", "Hello there.")])
    first = Memory.objects.for_bucket(bucket).get(content="Hi.")
    MemoryVersion.objects.create(
        memory_id=first.pk, tenant_id=tenant.pk, bucket_id=bucket.pk, kind="edited", previous={"content": "Hey."},
        actor_kind="token", actor_id="7", actor_label="egm_abc",
    )  # fmt: skip
    body = export(api, bucket, versions="true")
    versions = {line["content"]: line["versions"] for line in parsed(body)}
    assert versions["Hello there."] == []
    assert [(v["kind"], v["previous"]) for v in versions["Hi."]] == [("edited", {"content": "Hey."})]

    other = bucket_create(tenant=tenant, name="copy")
    assert send(api, other, body).json()["imported"] == 2
    copied = Memory.objects.for_bucket(other).get(content="Hi.")
    history = MemoryVersion.objects.get(memory_id=copied.pk)
    assert (history.bucket_id, history.previous, history.actor_label) == (other.pk, {"content": "Hey."}, "egm_abc")
    # The run goes on in the new bucket: the next message takes the imported ones as context.
    response = api.post(f"/api/v1/buckets/{other.pk}/memories", {"content": "How are you?", "run_id": "chat"},
                        format="json")  # fmt: skip
    following = Memory.objects.get(pk=response.json()["results"][0]["id"])
    assert following.context_text == "Hi.\nHello there."
    assert following.sequence_id == copied.sequence_id == run_sequence_id(other, "chat")
    assert following.sequence_index == 2


def _version(n: int) -> dict:
    return {"kind": "edited", "previous": {"content": f"Draft {n}."}, "actor_kind": "token",
            "created_at": (BASE_TIME + timedelta(minutes=n)).isoformat()}  # fmt: skip


def test_a_line_carrying_more_history_than_a_memory_keeps_is_refused(api, bucket):
    """Issue 46, item 9: one line carried 20,000 versions, all written, counted by no quota."""
    response = send(api, bucket, lines({"content": "Edited a lot.", "versions": [_version(n) for n in range(1_001)]}))
    assert response.status_code == 400, response.content
    assert "versions: Ensure this field has no more than 1000 elements." in response.json()["detail"]
    assert not Memory.objects.for_bucket(bucket).exists()
    assert not MemoryVersion.objects.filter(bucket_id=bucket.pk).exists()

    body = lines({"content": "Edited a lot.", "versions": [_version(n) for n in range(1_000)]})
    assert send(api, bucket, body).json()["imported"] == 1
    assert MemoryVersion.objects.filter(bucket_id=bucket.pk).count() == 1_000


def test_an_export_carries_the_newest_versions_an_import_takes(api, bucket, tenant):
    [result] = memories_ingest(bucket=bucket, items=[MemoryInput(content="Edited very often.")])
    MemoryVersion.objects.bulk_create(
        MemoryVersion(memory_id=result.id, tenant_id=tenant.pk, bucket_id=bucket.pk, kind="edited",
                      previous={"content": f"Draft {n}."}, actor_kind="token")
        for n in range(1_005)
    )  # fmt: skip
    [line] = parsed(export(api, bucket, versions="true"))
    assert len(line["versions"]) == 1_000
    assert line["versions"][0]["previous"] == {"content": "Draft 5."}  # the oldest five left out
    assert line["versions"][-1]["previous"] == {"content": "Draft 1004."}
    other = bucket_create(tenant=tenant, name="copy")
    assert send(api, other, lines(line)).json()["imported"] == 1


def test_vectors_of_another_model_are_left_to_the_enrichment(api, bucket):
    vector_text = base64.b64encode(np.full(384, 384**-0.5, dtype="<f4").tobytes()).decode()
    body = lines({"content": "Made elsewhere.", "engram": {"model": "another-model", "embedding": vector_text}})
    report = send(api, bucket, body).json()
    assert (report["imported"], report["embeddings_reused"], report["pending_enrichment"]) == (1, 0, 1)
    assert Memory.objects.for_bucket(bucket).get().embedding is None


def test_an_empty_body_imports_nothing(api, bucket):
    assert send(api, bucket, b"").json()["lines"] == 0
    assert send(api, bucket, b"\n  \n").json()["imported"] == 0


# --- bad input ------------------------------------------------------------------------------------

GOOD = {"content": "A good line."}
BAD_LINES = [
    ('{"content": "unterminated', "JSON parse error"),
    ('["content"]', "A line must be a JSON object."),
    ('{"content": "x", "colour": "blue"}', "colour: Unknown field."),
    ('{"content": "' + "x" * 20_001 + '"}', "content: Ensure this field has no more than 20000 characters."),
    ('{"content": ""}', "content: This field may not be blank."),
    ('{"content": "nul \\u0000"}', "content: Must not contain NUL characters."),
    ('{"content": "x", "created_at": "1850-01-01T00:00:00Z"}', "created_at: Must be between"),
    ('{"content": "x", "importance": 2}', "importance: Ensure this value is less than or equal to 1.0."),
    ('{"content": "x", "engram": {"embedding": "AAAA", "model": "m"}}', "engram.embedding: Must be a base64"),
    ('{"content": "x", "engram": {"embedding": null, "sequence_index": 3}}', "engram.sequence_index: A sequence"),
    ('{"content": "x", "metadata": {"_engram_links": []}}', "metadata: Keys starting with '_engram' are reserved"),
    ('{"content": "x", "versions": [{"kind": "nope"}]}', "versions.0.kind"),
    ('{"content": 1e999}', "JSON parse error"),
    (b'{"content": "caf\xe9"}', "JSON parse error"),
]


@pytest.mark.parametrize(("line", "reason"), BAD_LINES, ids=range(len(BAD_LINES)))
def test_a_bad_line_refuses_the_whole_import_and_writes_nothing(api, bucket, line, reason):
    raw = line if isinstance(line, bytes) else line.encode()
    body = json.dumps(GOOD).encode() + b"\n\n" + raw + b"\n" + json.dumps({"content": "Another."}).encode()
    response = send(api, bucket, body)
    assert response.status_code == 400, response.content
    error = response.json()
    assert error["code"] == "invalid_lines" and error["rejected_count"] == 1
    assert error["rejected"][0]["line"] == 3
    assert reason in error["rejected"][0]["detail"], error
    assert error["detail"].startswith("line 3: ") and "nothing was imported" in error["detail"]
    assert not Memory.objects.for_bucket(bucket).exists()


def test_skip_invalid_imports_the_rest_and_reports_each_rejected_line(api, bucket):
    body = lines(GOOD, {"content": ""}, {"content": "Also fine."}) + "not json\n"
    response = send(api, bucket, body, skip_invalid="true")
    assert response.status_code == 200
    report = response.json()
    assert (report["lines"], report["imported"], report["rejected_count"]) == (4, 2, 2)
    assert [r["line"] for r in report["rejected"]] == [2, 4]
    assert report["rejected"][0]["errors"] == {"content": ["This field may not be blank."]}
    assert Memory.objects.for_bucket(bucket).count() == 2


def test_skip_invalid_still_refuses_a_body_without_one_valid_line(api, bucket):
    response = send(api, bucket, "0\n[]\n", skip_invalid="true")
    assert response.status_code == 400 and response.json()["rejected_count"] == 2


def test_an_over_long_line_is_rejected_without_reading_it_whole(api, bucket, monkeypatch):
    from memories import transfer_format

    monkeypatch.setattr(transfer_format, "MAX_LINE_BYTES", 100)
    body = lines(GOOD, {"content": "y" * 500}, {"content": "After it."})
    report = send(api, bucket, body, skip_invalid="true").json()
    assert report["rejected"] == [{"line": 2, "detail": "The line is longer than 100 bytes."}]
    assert report["imported"] == 2


@override_settings(ENGRAM_IMPORT_MAX_BYTES=200)
def test_a_body_over_the_import_limit_is_413_and_writes_nothing(api, bucket):
    small = lines(GOOD)
    assert send(api, bucket, small).status_code == 200
    response = send(api, bucket, lines(*[{"content": f"Line {i}."} for i in range(20)]))
    assert response.status_code == 413 and response.json()["code"] == "too_large"
    assert "ENGRAM_IMPORT_MAX_BYTES" in response.json()["detail"]
    assert Memory.objects.for_bucket(bucket).count() == 1


def test_import_bodies_are_json_lines(api, bucket):
    response = send(api, bucket, lines(GOOD), content_type="application/json")
    assert (response.status_code, response.json()["code"]) == (415, "unsupported_media_type")
    response = send(api, bucket, lines(GOOD), content_type="application/x-ndjson; charset=latin-1")
    assert response.status_code == 415
    assert send(api, bucket, lines(GOOD), content_type="application/jsonl; charset=utf-8").status_code == 200


def test_unknown_query_parameters_are_refused(api, bucket):
    assert api.get(export_url(bucket, vectors="true")).status_code == 400
    assert send(api, bucket, lines(GOOD), skip="true").status_code == 400
    assert not Memory.objects.for_bucket(bucket).exists()


# --- tenants and scopes ---------------------------------------------------------------------------


def test_another_tenants_bucket_is_404_and_unchanged(api, bucket, outsider_api):
    memories_ingest(bucket=bucket, items=[MemoryInput(content="Private to Acme.")])
    response = outsider_api.get(export_url(bucket))
    assert response.status_code == 404 and b"Private" not in response.content
    assert send(outsider_api, bucket, lines({"content": "Planted."})).status_code == 404
    missing = SimpleNamespace(pk=uuid.uuid4())
    assert outsider_api.get(export_url(missing)).json() == response.json()
    assert list(Memory.objects.for_bucket(bucket).values_list("content", flat=True)) == ["Private to Acme."]


def test_import_needs_write_and_export_needs_read(tenant, bucket):
    memories_ingest(bucket=bucket, items=[MemoryInput(content="Readable.")])
    reader, writer = make_client(tenant, scopes=("read",)), make_client(tenant, scopes=("write",))
    assert send(reader, bucket, lines(GOOD)).status_code == 403
    assert writer.get(export_url(bucket)).status_code == 403
    assert reader.get(export_url(bucket)).status_code == 200
    report = send(writer, bucket, lines(GOOD))
    assert report.status_code == 200 and "content" not in report.content.decode()
    assert Memory.objects.for_bucket(bucket).count() == 2


# --- the commands ---------------------------------------------------------------------------------


def test_export_and_import_commands_round_trip_with_progress(bucket, tenant, tmp_path):
    memories_ingest(bucket=bucket, items=[MemoryInput(content=f"Command memory {i}.") for i in range(30)])
    out, err = io.StringIO(), io.StringIO()
    path = tmp_path / "bucket.jsonl"
    call_command("export_bucket", str(bucket.pk), "--out", str(path), "--embeddings", stdout=out, stderr=err)
    assert len(path.read_text().splitlines()) == 30 and not (tmp_path / "bucket.jsonl.partial").exists()
    assert "30/30 memories" in err.getvalue()
    out = io.StringIO()
    call_command("export_bucket", str(bucket.pk), "--no-progress", stdout=out, stderr=io.StringIO())
    assert [line["content"] for line in parsed(out.getvalue().encode())] == [f"Command memory {i}." for i in range(30)]

    copy = bucket_create(tenant=tenant, name="copy")
    out, err = io.StringIO(), io.StringIO()
    call_command("import_bucket", str(copy.pk), str(path), stdout=out, stderr=err)
    report = json.loads(out.getvalue())
    assert (report["imported"], report["embeddings_reused"], report["pending_enrichment"]) == (30, 30, 0)
    assert "check copy" in err.getvalue() and "import copy" in err.getvalue() and "100%" in err.getvalue()

    path.write_text(lines(GOOD, {"content": "x", "oops": 1}))
    with pytest.raises(CommandError, match="line 2: oops: Unknown field"):
        call_command("import_bucket", str(copy.pk), str(path), "--no-progress", stdout=io.StringIO(),
                     stderr=io.StringIO())  # fmt: skip
    assert Memory.objects.for_bucket(copy).count() == 30
    with pytest.raises(CommandError, match="no bucket"):
        call_command("import_bucket", str(uuid.uuid4()), str(path), stdout=io.StringIO(), stderr=io.StringIO())


# --- through a real server ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory):
    """gunicorn on the test database, with small body limits, and a bucket with a token (both
    committed: the server has its own connection)."""
    log = tmp_path_factory.mktemp("transfer") / "server.log"
    env = base_env(
        DATABASE_URL=test_database_url(), ENGRAM_EMBEDDINGS="off", ENGRAM_MAX_BODY_BYTES="1000",
        ENGRAM_IMPORT_MAX_BYTES="20000",
    )  # fmt: skip
    with django_db_blocker.unblock():
        tenant = tenant_services.tenant_create(name="Transfer server")
        bucket = bucket_create(tenant=tenant, name="main")
        secret = tenant_services.token_issue(tenant=tenant, name="t", scopes=["read", "write"]).secret
    try:
        with web_server(env, workers=1, log=log) as base:
            yield SimpleNamespace(port=urllib.parse.urlsplit(base).port, bucket=bucket, secret=secret, log=log)
    finally:
        with django_db_blocker.unblock():
            tenant.delete()


def _request(server, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        connection.putrequest(method, path, skip_accept_encoding=True)
        for name, value in {"Authorization": f"Bearer {server.secret}", **(headers or {})}.items():
            connection.putheader(name, value)
        connection.endheaders()
        if body is not None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # answered before the end
                connection.send(body)
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type"), response.read()
    finally:
        connection.close()


def _chunked(payload: bytes, size: int = 700) -> bytes:
    parts = [payload[i : i + size] for i in range(0, len(payload), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts) + b"0\r\n\r\n"


@pytest.mark.slow
def test_a_chunked_import_streams_past_the_body_limit_up_to_its_own(server):
    path = f"/api/v1/buckets/{server.bucket.pk}/import"
    chunked = {"Content-Type": NDJSON, "Transfer-Encoding": "chunked"}
    body = lines(*[{"content": f"Streamed memory {i}."} for i in range(100)]).encode()
    assert 1000 < len(body) < 20000  # over ENGRAM_MAX_BODY_BYTES, under ENGRAM_IMPORT_MAX_BYTES
    status, _, answer = _request(server, "POST", path, _chunked(body), chunked)
    assert status == 200 and json.loads(answer)["imported"] == 100, answer

    too_big = lines(*[{"content": f"Too much {i}."} for i in range(1000)]).encode()
    assert len(too_big) > 20000
    status, _, answer = _request(server, "POST", path, _chunked(too_big), chunked)
    assert (status, json.loads(answer)["code"]) == (413, "too_large")
    headers = {"Content-Type": NDJSON, "Content-Length": str(len(too_big))}
    status, _, answer = _request(server, "POST", path, too_big, headers)
    assert (status, json.loads(answer)["code"]) == (413, "too_large")

    # The export streams them back (chunked), and nothing of the refused imports is there.
    status, content_type, exported = _request(server, "GET", f"/api/v1/buckets/{server.bucket.pk}/export")
    assert (status, content_type) == (200, NDJSON)
    assert sorted(line["content"] for line in parsed(exported)) == sorted(f"Streamed memory {i}." for i in range(100))
    log = server.log.read_text(errors="replace")
    assert "Traceback" not in log, log[log.find("Traceback") :][:3000]
