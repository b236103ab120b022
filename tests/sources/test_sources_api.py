"""The source endpoints: submit, list, show, delete — scopes, isolation, limits and provenance."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from memories.models import Memory
from memories.services import MemoryInput, memories_ingest
from sources.apis import MAX_CONVERSATION_CHARS, MAX_DOCUMENT_BYTES, MAX_MESSAGE_CHARS, MAX_MESSAGES
from sources.models import Source, SourceChunk, SourceChunkMemory, TrashedChunkLink
from sources.services.process import source_process
from tests.factories import make_client

pytestmark = pytest.mark.django_db

DOC = {
    "title": "Trip notes",
    "text": "# Lisbon\n\nWe stayed in Alfama for six nights in May 2024.\n\nThe tram 28 was packed.",
}
CONV = {
    "title": "chat",
    "messages": [
        {"role": "user", "content": "My sister Ana moved to Porto in 2023.", "timestamp": "2024-01-02T10:00:00Z"},
        {"role": "assistant", "content": "Porto is lovely; the Ribeira is worth a walk.",
         "timestamp": "2024-01-02T10:01:00Z"},
    ],
}  # fmt: skip


def documents_url(bucket):
    return f"/api/v1/buckets/{bucket.pk}/documents"


def conversations_url(bucket):
    return f"/api/v1/buckets/{bucket.pk}/conversations"


def process_all():
    for source_id in Source.objects.values_list("pk", flat=True):
        source_process(source_id=source_id)


# --- submit ---------------------------------------------------------------------------------------


def test_submitting_a_document_answers_202_at_once(api, bucket):
    response = api.post(documents_url(bucket), DOC, format="json")
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status"] == "pending" and body["deduplicated"] is False and body["chunks_total"] == 1
    assert response["Location"] == f"/api/v1/sources/{body['id']}"
    assert not Memory.objects.exists()  # the work runs in the background
    source = Source.objects.get(pk=body["id"])
    assert source.submitted_by == f"token:{api.token.prefix}" and source.text == DOC["text"]


def test_submitting_a_conversation_answers_202_and_dedups_a_resubmission(api, bucket):
    first = api.post(conversations_url(bucket), CONV, format="json")
    assert first.status_code == 202, first.content
    again = api.post(conversations_url(bucket), CONV, format="json")
    assert again.status_code == 202
    assert again.json()["id"] == first.json()["id"] and again.json()["deduplicated"] is True
    assert Source.objects.count() == 1 and SourceChunk.objects.count() == 2


def test_processing_runs_after_commit_through_the_queue(api, bucket, celery_eager, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(conversations_url(bucket), CONV, format="json")
    assert response.status_code == 202
    detail = api.get(f"/api/v1/sources/{response.json()['id']}").json()
    assert detail["status"] == "done"
    assert detail["progress"] == {"chunks_done": 2, "chunks_total": 2, "fraction": 1.0}
    assert Memory.objects.for_bucket(bucket).count() == 2


def test_a_broker_outage_does_not_fail_a_submission(api, bucket, django_capture_on_commit_callbacks):
    from memories import hooks
    from tests.support import use_broker

    hooks.reset_backoff()
    try:
        with use_broker("redis://127.0.0.1:1/0"), django_capture_on_commit_callbacks(execute=True):
            response = api.post(documents_url(bucket), DOC, format="json")
    finally:
        hooks.reset_backoff()
    assert response.status_code == 202
    assert Source.objects.get(pk=response.json()["id"]).status == "pending"  # the sweep will take it


# --- read -----------------------------------------------------------------------------------------


def test_source_detail_shows_progress_chunks_and_their_memories(api, bucket):
    source_id = api.post(conversations_url(bucket), CONV, format="json").json()["id"]
    pending = api.get(f"/api/v1/sources/{source_id}").json()
    assert pending["status"] == "pending" and pending["progress"]["chunks_done"] == 0
    assert [c["status"] for c in pending["chunks"]] == ["pending", "pending"]
    process_all()
    body = api.get(f"/api/v1/sources/{source_id}").json()
    assert body["kind"] == "conversation" and body["status"] == "done" and body["memories_created"] == 2
    assert body["finished_at"] and body["distilled_by"] == "rules-v1"
    first, second = body["chunks"]
    assert (first["ordinal"], first["role"], first["timestamp"]) == (0, "user", "2024-01-02T10:00:00Z")
    assert [m["content"] for m in first["memories"]] == ["My sister Ana moved to Porto in 2023."]
    assert first["memories"][0]["created"] is True
    assert second["role"] == "assistant" and len(second["memories"]) == 1
    # Chunks are paged.
    page = api.get(f"/api/v1/sources/{source_id}?chunk_offset=1&chunk_limit=1").json()
    assert [c["ordinal"] for c in page["chunks"]] == [1] and page["chunk_offset"] == 1


def test_memory_detail_names_its_source_and_chunk(api, bucket):
    source_id = api.post(conversations_url(bucket), CONV, format="json").json()["id"]
    process_all()
    link = SourceChunkMemory.objects.get(chunk__ordinal=0)
    body = api.get(f"/api/v1/memories/{link.memory_id}").json()
    assert body["source"] == {
        "source_id": source_id, "chunk_id": str(link.chunk_id), "kind": "conversation", "title": "chat",
    }  # fmt: skip
    [direct] = memories_ingest(bucket=bucket, items=[MemoryInput(content="written directly")])
    assert api.get(f"/api/v1/memories/{direct.id}").json()["source"] is None


def test_list_sources_newest_first_with_filters_and_pages(api, bucket):
    ids = [api.post(documents_url(bucket), {**DOC, "title": f"doc {i}"}, format="json").json()["id"] for i in range(3)]
    conv = api.post(conversations_url(bucket), CONV, format="json").json()["id"]
    # (one test transaction: give the rows distinct creation times)
    for minutes, source_id in enumerate([*ids, conv]):
        Source.objects.filter(pk=source_id).update(created_at=timezone.now() + timedelta(minutes=minutes))
    body = api.get(f"/api/v1/buckets/{bucket.pk}/sources?page_size=2").json()
    assert [s["id"] for s in body["results"]] == [conv, ids[2]] and body["next"]
    assert "text" not in body["results"][0] and body["results"][0]["progress"]["chunks_total"] == 2
    docs = api.get(f"/api/v1/buckets/{bucket.pk}/sources?kind=document").json()["results"]
    assert {s["id"] for s in docs} == set(ids)
    assert api.get(f"/api/v1/buckets/{bucket.pk}/sources?status=done").json()["results"] == []
    assert api.get(f"/api/v1/buckets/{bucket.pk}/sources?status=nope").status_code == 400


# --- delete ---------------------------------------------------------------------------------------


def test_deleting_a_source_deletes_exactly_the_memories_it_created(api, bucket):
    [existing] = memories_ingest(
        bucket=bucket, items=[MemoryInput(content="We stayed in Alfama for six nights in May 2024.")]
    )
    unrelated = memories_ingest(bucket=bucket, items=[MemoryInput(content="Unrelated fact about jazz.")])[0]
    source_id = api.post(documents_url(bucket), DOC, format="json").json()["id"]
    process_all()
    source = Source.objects.get(pk=source_id)
    assert source.memories_created == 1 and source.memories_deduplicated == 1
    created = SourceChunkMemory.objects.get(source_id=source_id, created=True).memory_id

    response = api.delete(f"/api/v1/sources/{source_id}")
    assert response.status_code == 200, response.content
    assert response.json() == {"id": source_id, "memories_deleted": 1, "memories_kept": 0}
    assert not Source.objects.exists() and not SourceChunk.objects.exists() and not SourceChunkMemory.objects.exists()
    assert not Memory.objects.filter(pk=created).exists()
    # The memory that existed before (the statement deduplicated onto it) and the unrelated one stay.
    assert set(Memory.objects.values_list("pk", flat=True)) == {existing.id, unrelated.id}
    assert api.delete(f"/api/v1/sources/{source_id}").status_code == 404


def test_a_memory_two_sources_state_is_kept_until_the_last_of_them_goes(api, bucket):
    first = api.post(documents_url(bucket), DOC, format="json").json()["id"]
    second = api.post(documents_url(bucket), {**DOC, "title": "copy"}, format="json").json()["id"]
    for source_id in (first, second):  # in this order: the first creates the memories (process_all's is arbitrary)
        source_process(source_id=source_id)
    shared = set(SourceChunkMemory.objects.filter(source_id=first).values_list("memory_id", flat=True))
    assert shared and shared == set(
        SourceChunkMemory.objects.filter(source_id=second).values_list("memory_id", flat=True)
    )
    assert api.delete(f"/api/v1/sources/{first}").json()["memories_kept"] == len(shared)
    assert Memory.objects.filter(pk__in=shared).count() == len(shared)
    assert api.delete(f"/api/v1/sources/{second}").json()["memories_deleted"] == len(shared)
    assert not Memory.objects.exists()


def test_deleting_a_memory_removes_it_from_its_source(api, bucket):
    source_id = api.post(conversations_url(bucket), CONV, format="json").json()["id"]
    process_all()
    link = SourceChunkMemory.objects.filter(source_id=source_id).first()
    assert api.delete(f"/api/v1/memories/{link.memory_id}").status_code == 204
    assert not SourceChunkMemory.objects.filter(pk=link.pk).exists()  # ON DELETE CASCADE


def test_a_restored_memory_is_linked_to_its_source_and_chunk_again(api, bucket):
    source_id = api.post(conversations_url(bucket), CONV, format="json").json()["id"]
    process_all()
    link = SourceChunkMemory.objects.get(source_id=source_id, chunk__ordinal=0)
    before = api.get(f"/api/v1/memories/{link.memory_id}").json()["source"]
    assert before["chunk_id"] == str(link.chunk_id)
    assert api.delete(f"/api/v1/memories/{link.memory_id}").status_code == 204
    assert not SourceChunkMemory.objects.filter(memory_id=link.memory_id).exists()
    assert api.post(f"/api/v1/memories/{link.memory_id}/restore").status_code == 200
    assert api.get(f"/api/v1/memories/{link.memory_id}").json()["source"] == before
    restored = SourceChunkMemory.objects.get(memory_id=link.memory_id)
    assert (restored.chunk_id, restored.created, restored.position) == (link.chunk_id, link.created, link.position)
    [chunk] = [c for c in api.get(f"/api/v1/sources/{source_id}").json()["chunks"] if c["ordinal"] == 0]
    assert [m["id"] for m in chunk["memories"]] == [str(link.memory_id)]
    assert not TrashedChunkLink.objects.exists()


def test_a_trashed_link_goes_with_its_source_or_the_purged_memory(api, bucket):
    from memories.models import DeletedMemory

    source_id = api.post(conversations_url(bucket), CONV, format="json").json()["id"]
    process_all()
    first, second = SourceChunkMemory.objects.filter(source_id=source_id).order_by("chunk__ordinal")
    for link in (first, second):
        assert api.delete(f"/api/v1/memories/{link.memory_id}").status_code == 204
    assert TrashedChunkLink.objects.count() == 2
    DeletedMemory.objects.filter(pk=first.memory_id).delete()  # what the purge job does past retention
    assert list(TrashedChunkLink.objects.values_list("memory_id", flat=True)) == [second.memory_id]
    Source.objects.filter(pk=source_id).delete()
    assert not TrashedChunkLink.objects.exists()
    # Restored after its source went: no link to give back.
    assert api.post(f"/api/v1/memories/{second.memory_id}/restore").status_code == 200
    assert api.get(f"/api/v1/memories/{second.memory_id}").json()["source"] is None


def test_deleting_the_bucket_deletes_its_sources(admin_api, bucket):
    admin_api.post(documents_url(bucket), DOC, format="json")
    process_all()
    assert admin_api.delete(f"/api/v1/buckets/{bucket.pk}").status_code == 204
    assert not Source.objects.exists() and not SourceChunk.objects.exists() and not SourceChunkMemory.objects.exists()


# --- scopes and isolation -----------------------------------------------------------------------


def test_scopes_write_to_submit_and_delete_read_to_read(tenant, bucket):
    reader = make_client(tenant, scopes=("read",))
    writer = make_client(tenant, scopes=("write",))
    assert reader.post(documents_url(bucket), DOC, format="json").status_code == 403
    assert reader.post(conversations_url(bucket), CONV, format="json").status_code == 403
    assert not Source.objects.exists()  # the refused submissions stored nothing
    source_id = writer.post(documents_url(bucket), DOC, format="json").json()["id"]
    assert writer.get(f"/api/v1/sources/{source_id}").status_code == 403
    assert writer.get(f"/api/v1/buckets/{bucket.pk}/sources").status_code == 403
    read = reader.get(f"/api/v1/sources/{source_id}")
    assert read.status_code == 200 and read.json()["id"] == source_id and read.json()["title"] == DOC["title"]
    assert [s["id"] for s in reader.get(f"/api/v1/buckets/{bucket.pk}/sources").json()["results"]] == [source_id]
    assert reader.delete(f"/api/v1/sources/{source_id}").status_code == 403
    assert Source.objects.filter(pk=source_id).exists()
    assert writer.delete(f"/api/v1/sources/{source_id}").status_code == 200
    assert not Source.objects.filter(pk=source_id).exists()


def test_outsider_gets_404_on_every_endpoint_and_changes_nothing(api, outsider_api, bucket):
    source_id = api.post(documents_url(bucket), DOC, format="json").json()["id"]
    process_all()
    memories = Memory.objects.count()
    assert outsider_api.post(documents_url(bucket), DOC, format="json").status_code == 404
    assert outsider_api.post(conversations_url(bucket), CONV, format="json").status_code == 404
    assert outsider_api.get(f"/api/v1/buckets/{bucket.pk}/sources").status_code == 404
    assert outsider_api.get(f"/api/v1/sources/{source_id}").status_code == 404
    assert outsider_api.delete(f"/api/v1/sources/{source_id}").status_code == 404
    assert Source.objects.count() == 1 and Memory.objects.count() == memories


def test_a_bucket_restricted_token_sees_only_its_bucket(tenant, api, bucket):
    from memories.services.buckets import bucket_create

    other = bucket_create(tenant=tenant, name="other")
    restricted = make_client(tenant, bucket=other)
    source_id = api.post(documents_url(bucket), DOC, format="json").json()["id"]
    assert restricted.post(documents_url(bucket), {**DOC, "text": "Another trip."}, format="json").status_code == 404
    assert restricted.get(f"/api/v1/buckets/{bucket.pk}/sources").status_code == 404
    assert restricted.get(f"/api/v1/sources/{source_id}").status_code == 404
    assert restricted.delete(f"/api/v1/sources/{source_id}").status_code == 404
    assert list(Source.objects.values_list("id", flat=True)) == [uuid.UUID(source_id)]  # nothing added or removed
    accepted = restricted.post(documents_url(other), DOC, format="json")
    assert accepted.status_code == 202 and Source.objects.get(pk=accepted.json()["id"]).bucket_id == other.pk


# A fixed unknown id: every test process (pytest-xdist) must collect the same test ids.
@pytest.mark.parametrize("source_id", ["not-a-uuid", "6f1d2c3b-4a5e-4f60-8a71-92b3c4d5e6f7"])
def test_unknown_or_malformed_source_id_is_404(api, source_id):
    assert api.get(f"/api/v1/sources/{source_id}").status_code == 404
    assert api.delete(f"/api/v1/sources/{source_id}").status_code == 404


# --- bad input --------------------------------------------------------------------------------------

BAD_DOCUMENTS = {
    "missing text": {"title": "t"},
    "missing title": {"text": "some text"},
    "blank text": {"title": "t", "text": "  \n "},
    "text not a string": {"title": "t", "text": ["a"]},
    "NUL in text": {"title": "t", "text": "a\x00b"},
    "NUL in title": {"title": "t\x00", "text": "ok"},
    "text too large": {"title": "t", "text": "x" * (MAX_DOCUMENT_BYTES + 1)},
    "text too large in bytes": {"title": "t", "text": "é" * (MAX_DOCUMENT_BYTES // 2 + 1)},
    "title too long": {"title": "t" * 501, "text": "ok"},
    "unknown field": {"title": "t", "text": "ok", "txt": "typo"},
    "metadata not an object": {"title": "t", "text": "ok", "metadata": [1]},
    "reserved metadata key": {"title": "t", "text": "ok", "metadata": {"_engram_x": 1}},
    "bad created_at": {"title": "t", "text": "ok", "created_at": "yesterday"},
    "bad attribution": {"title": "t", "text": "ok", "attributed_to": "system"},
}


@pytest.mark.parametrize("payload", list(BAD_DOCUMENTS.values()), ids=list(BAD_DOCUMENTS))
def test_bad_document_is_400_and_writes_nothing(api, bucket, payload):
    response = api.post(documents_url(bucket), payload, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid" and response.json()["detail"]
    assert not Source.objects.exists() and not SourceChunk.objects.exists()


def _messages(n, **fields):
    return [{"role": "user", "content": f"message {i}", **fields} for i in range(n)]


BAD_CONVERSATIONS = {
    "missing messages": {"title": "t"},
    "empty messages": {"messages": []},
    "messages not a list": {"messages": "hello"},
    "message not an object": {"messages": ["hello"]},
    "too many messages": {"messages": _messages(MAX_MESSAGES + 1)},
    "bad role": {"messages": [{"role": "system", "content": "x"}]},
    "missing role": {"messages": [{"content": "x"}]},
    "blank content": {"messages": [{"role": "user", "content": " "}]},
    "content too long": {"messages": [{"role": "user", "content": "x" * (MAX_MESSAGE_CHARS + 1)}]},
    "too much text in all": {
        "messages": [{"role": "user", "content": "x" * MAX_MESSAGE_CHARS}]
        * (MAX_CONVERSATION_CHARS // MAX_MESSAGE_CHARS + 1)
    },
    "NUL in content": {"messages": [{"role": "user", "content": "a\x00b"}]},
    "bad timestamp": {"messages": [{"role": "user", "content": "x", "timestamp": "noon"}]},
    "unknown message field": {"messages": [{"role": "user", "content": "x", "mood": "happy"}]},
    "unknown field": {"messages": _messages(1), "speakr": "Maya"},
    "speaker not a string": {"messages": _messages(1), "speaker": 5},
    "run_id too long": {"messages": _messages(1), "run_id": "r" * 201},
}  # fmt: skip


@pytest.mark.parametrize("payload", list(BAD_CONVERSATIONS.values()), ids=list(BAD_CONVERSATIONS))
def test_bad_conversation_is_400_and_writes_nothing(api, bucket, payload):
    response = api.post(conversations_url(bucket), payload, format="json")
    assert response.status_code == 400, response.content[:500]
    assert response.json()["code"] == "invalid"
    assert not Source.objects.exists() and not SourceChunk.objects.exists()


@pytest.mark.parametrize("body", [[DOC], "text", 42])
def test_a_body_that_is_not_an_object_is_400(api, bucket, body):
    assert api.post(documents_url(bucket), body, format="json").status_code == 400
    assert api.post(conversations_url(bucket), body, format="json").status_code == 400
    assert not Source.objects.exists()


def test_the_largest_accepted_conversation_is_accepted(api, bucket):
    response = api.post(conversations_url(bucket), {"messages": _messages(MAX_MESSAGES)}, format="json")
    assert response.status_code == 202
    assert Source.objects.get().chunks_total == MAX_MESSAGES


def test_submissions_and_deletes_are_audited(api, bucket):
    source_id = api.post(documents_url(bucket), DOC, format="json").json()["id"]
    api.post(documents_url(bucket), DOC, format="json")  # a re-submission is audited too
    api.delete(f"/api/v1/sources/{source_id}")
    events = list(AuditEvent.objects.filter(object_type="source").order_by("created_at", "id"))
    assert [e.action for e in events] == ["source.submit", "source.submit", "source.delete"]
    assert all(e.object_ids == [source_id] and e.actor_label == api.token.prefix for e in events)
    assert [e.details["deduplicated"] for e in events[:2]] == [False, True]


def test_the_cascades_are_declared_in_the_database(api, bucket, tenant):
    from django.db import connection

    def foreign_keys(table):
        with connection.cursor() as cur:
            cur.execute(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'f'",
                [table],
            )
            return {row[0] for row in cur.fetchall()}

    assert foreign_keys("sources") == {
        "FOREIGN KEY (tenant_id) REFERENCES tenants(id) ON DELETE CASCADE",
        "FOREIGN KEY (bucket_id) REFERENCES buckets(id) ON DELETE CASCADE",
    }
    assert foreign_keys("source_chunks") == {"FOREIGN KEY (source_id) REFERENCES sources(id) ON DELETE CASCADE"}
    assert foreign_keys("source_chunk_memories") == {
        "FOREIGN KEY (source_id) REFERENCES sources(id) ON DELETE CASCADE",
        "FOREIGN KEY (chunk_id) REFERENCES source_chunks(id) ON DELETE CASCADE",
        "FOREIGN KEY (memory_id) REFERENCES memories(id) ON DELETE CASCADE",
    }
    assert foreign_keys("source_chunk_links_trashed") == {
        "FOREIGN KEY (source_id) REFERENCES sources(id) ON DELETE CASCADE",
        "FOREIGN KEY (chunk_id) REFERENCES source_chunks(id) ON DELETE CASCADE",
        "FOREIGN KEY (memory_id) REFERENCES memories_deleted(id) ON DELETE CASCADE",
    }
    # Deleting a tenant in plain SQL leaves nothing of its sources behind.
    api.post(conversations_url(bucket), CONV, format="json")
    process_all()
    with connection.cursor() as cur:
        cur.execute("DELETE FROM api_tokens WHERE tenant_id = %s", [tenant.pk])
        cur.execute("DELETE FROM tenants WHERE id = %s", [tenant.pk])
    assert not Source.objects.exists() and not SourceChunk.objects.exists() and not SourceChunkMemory.objects.exists()


@pytest.mark.parametrize("when", ["9999-12-31T23:59:59Z", "1899-12-31T23:59:59Z"])
def test_document_created_at_out_of_range_is_400_and_writes_nothing(api, bucket, when):
    response = api.post(documents_url(bucket), {**DOC, "created_at": when}, format="json")
    assert response.status_code == 400, response.content
    assert "created_at" in response.json()["errors"]
    assert not Source.objects.exists() and not SourceChunk.objects.exists()


@pytest.mark.parametrize("when", ["9999-12-31T23:59:59Z", "1899-12-31T23:59:59Z"])
def test_message_timestamp_out_of_range_is_400_and_writes_nothing(api, bucket, when):
    messages = [*CONV["messages"], {"role": "user", "content": "And then?", "timestamp": when}]
    response = api.post(conversations_url(bucket), {**CONV, "messages": messages}, format="json")
    assert response.status_code == 400, response.content
    assert not Source.objects.exists() and not SourceChunk.objects.exists()
