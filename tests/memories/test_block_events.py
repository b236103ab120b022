"""Memory blocks in the change feed (GET /api/v1/buckets/{id}/events): a block's create, edit
and delete are events of their own kinds, with the block's label, agent, version, who changed it
and why; held to the token's agents like a memory's events; an agent's erasure takes their text
out; a bucket merge announces the moved blocks in the target's feed."""

from __future__ import annotations

import pytest

from audit.services import Actor
from memories.models import MemoryEvent
from memories.services import memories_erase
from memories.services.buckets import bucket_create, bucket_merge
from memories.services.feed_writer import ERASED_AGENT
from tests.factories import make_client, write

pytestmark = pytest.mark.django_db


def _events(api, bucket, **params) -> list[dict]:
    response = api.get(f"/api/v1/buckets/{bucket.pk}/events", params)
    assert response.status_code == 200, response.content
    return response.json()["events"]


def _block_events(api, bucket) -> list[dict]:
    return [e for e in _events(api, bucket) if e["kind"].startswith("block_")]


def _put(api, bucket, label, body, agent_id=None, **headers):
    url = f"/api/v1/buckets/{bucket.pk}/blocks/{label}" + (f"?agent_id={agent_id}" if agent_id else "")
    return api.put(url, body, format="json", headers=headers)


def test_a_blocks_create_edit_and_delete_are_events_with_label_version_actor_and_reason(api, bucket):
    created = _put(api, bucket, "persona", {"content": "Calm and brief.", "reason": "first draft"})
    assert created.status_code == 201, created.content
    block_id = created.json()["id"]
    url = f"/api/v1/buckets/{bucket.pk}/blocks/persona"
    edited = api.patch(url, {"append": "Answers in Portuguese.", "reason": "user asked"}, format="json",
                       headers={"If-Match": created["ETag"]})  # fmt: skip
    assert edited.status_code == 200, edited.content
    limited = api.patch(url, {"max_tokens": 100}, format="json", headers={"If-Match": edited["ETag"]})
    assert limited.status_code == 200, limited.content
    deleted = api.delete(url, headers={"If-Match": limited["ETag"]})
    assert deleted.status_code == 204, deleted.content

    events = _block_events(api, bucket)
    assert [(e["kind"], e["block_id"], e["memory_id"]) for e in events] == [
        ("block_created", block_id, None), ("block_updated", block_id, None),
        ("block_updated", block_id, None), ("block_deleted", block_id, None),
    ]  # fmt: skip
    token_prefix = api.token.prefix
    first, append, limit, gone = (e["data"] for e in events)
    assert first["label"] == "persona" and first["agent_id"] is None and first["version"] == 1
    assert first["content"] == "Calm and brief." and first["reason"] == "first draft"
    assert first["actor"] == {"kind": "token", "id": str(api.token.pk), "label": token_prefix}
    assert "fields" not in first
    assert append["version"] == 2 and append["fields"] == ["content"] and append["reason"] == "user asked"
    assert append["content"] == "Calm and brief.\nAnswers in Portuguese."
    assert limit["version"] == 3 and limit["fields"] == ["max_tokens"] and limit["max_tokens"] == 100
    assert gone["version"] == 3 and "content" not in gone and gone["actor"]["kind"] == "token"
    assert gone["reason"] == ""
    # Memory events and block events share one feed and one cursor order.
    assert [e["id"] for e in events] == sorted(e["id"] for e in events)


def test_a_failed_block_write_records_no_event(api, bucket):
    created = _put(api, bucket, "human", {"content": "Ana, a sailor."})
    never = '"00000000-0000-0000-0000-000000000000.1"'
    stale = _put(api, bucket, "human", {"content": "Overwritten."}, **{"If-Match": never})
    assert stale.status_code == 412
    too_long = _put(api, bucket, "human", {"content": "word " * 50, "max_tokens": 5}, **{"If-Match": created["ETag"]})
    assert too_long.status_code == 400
    assert [e["kind"] for e in _block_events(api, bucket)] == ["block_created"]


def test_a_token_held_to_an_agent_sees_only_its_agents_and_shared_block_events(api, tenant, bucket):
    assert _put(api, bucket, "persona", {"content": "alfa persona"}, agent_id="alfa").status_code == 201
    assert _put(api, bucket, "persona", {"content": "beta persona"}, agent_id="beta").status_code == 201
    assert _put(api, bucket, "rules", {"content": "shared rules"}).status_code == 201

    alfa = make_client(tenant, scopes=("read",), agent_ids=["alfa"])
    assert [e["data"]["content"] for e in _block_events(alfa, bucket)] == ["alfa persona"]
    alfa_shared = make_client(tenant, scopes=("read",), agent_ids=["alfa"], include_shared=True)
    assert [e["data"]["content"] for e in _block_events(alfa_shared, bucket)] == ["alfa persona", "shared rules"]
    assert "beta" not in str(_events(alfa_shared, bucket))
    # A token of the whole tenant reads them all.
    assert len(_block_events(api, bucket)) == 3


def test_another_tenant_reads_no_block_events(api, bucket, outsider_api):
    _put(api, bucket, "persona", {"content": "A private persona."})
    response = outsider_api.get(f"/api/v1/buckets/{bucket.pk}/events")
    assert response.status_code == 404
    assert "private persona" not in response.content.decode()


def test_an_agents_erasure_takes_its_blocks_text_out_of_the_feed_and_records_their_deletion(api, bucket):
    created = _put(api, bucket, "human", {"content": "Ana lives in Faro.", "reason": "Ana said so"}, agent_id="ana")
    url = f"/api/v1/buckets/{bucket.pk}/blocks/human?agent_id=ana"
    api.patch(url, {"append": "Ana has a cat."}, format="json", headers={"If-Match": created["ETag"]})
    _put(api, bucket, "rules", {"content": "Shared rules stay."})
    memories_erase(tenant=bucket.tenant, fields={"agent_id": "ana"}, actor=Actor.system("test"))

    events = _block_events(api, bucket)
    assert [e["kind"] for e in events] == ["block_created", "block_updated", "block_created", "block_deleted"]
    text = str([e for e in events if e["block_id"] == created.json()["id"]])
    assert "Faro" not in text and "cat" not in text and "Ana said" not in text and "'ana'" not in text
    erased = [e for e in events if e["block_id"] == created.json()["id"]]
    assert all(e["data"]["erased"] is True for e in erased)
    assert erased[-1]["data"] == {"label": "human", "version": 2, "erased": True}
    assert events[2]["data"]["content"] == "Shared rules stay."  # another block's events are untouched
    agents = set(MemoryEvent.objects.filter(block_id=created.json()["id"]).values_list("agent_id", flat=True))
    assert agents == {ERASED_AGENT}


def test_a_bucket_merge_announces_the_moved_blocks_in_the_targets_feed(api, tenant, bucket):
    source = bucket_create(tenant=tenant, name="source")
    _put(api, source, "persona", {"content": "The source's persona."})
    _put(api, source, "notes", {"content": "The source's notes."})
    _put(api, bucket, "persona", {"content": "The target's persona."})
    bucket_merge(source=source, target=bucket, remove_source=False, actor=Actor.system("test"))

    moved = [e for e in _block_events(api, bucket) if e["kind"] == "block_updated"]
    by_label = {e["data"]["label"]: e["data"] for e in moved}
    renamed = f"persona-from-{source.pk.hex[:8]}"
    assert set(by_label) == {"notes", renamed}
    assert by_label["notes"]["fields"] == ["bucket_id"] and by_label["notes"]["from_bucket_id"] == str(source.pk)
    assert by_label[renamed]["fields"] == ["bucket_id", "label"]
    assert by_label[renamed]["content"] == "The source's persona."


def test_an_imported_block_is_an_event_and_an_unchanged_one_is_not(api, bucket):
    # An import sets blocks with block_put like the API: each line that changes a block is an event.
    lines = '{"block": {"label": "persona", "agent_id": null, "content": "Imported persona.", "max_tokens": 200}}\n'
    response = api.post(f"/api/v1/buckets/{bucket.pk}/import", data=lines.encode(), content_type="application/x-ndjson")
    assert response.status_code == 200, response.content
    [event] = _block_events(api, bucket)
    assert event["kind"] == "block_created" and event["data"]["reason"] == "import"
    # The same file again changes nothing, so it records nothing.
    api.post(f"/api/v1/buckets/{bucket.pk}/import", data=lines.encode(), content_type="application/x-ndjson")
    assert len(_block_events(api, bucket)) == 1
    assert write(bucket, "A memory after the block.", api=api)
    assert [e["kind"] for e in _events(api, bucket)][-1] == "created"
