"""GET/PATCH/DELETE /api/v1/memories/{id} and GET /api/v1/buckets/{id}/memories."""

from __future__ import annotations

import uuid

import pytest

from memories.models import Memory
from memories.services.buckets import bucket_create
from memories.text import text_hash
from tests.factories import write

pytestmark = pytest.mark.django_db


def test_get_memory(api, bucket):
    [memory_id] = write(bucket, {"content": "Biscuit is our dog", "hint_tags": ["pets"]}, api=api)
    body = api.get(f"/api/v1/memories/{memory_id}").json()
    assert body["id"] == memory_id and body["content"] == "Biscuit is our dog"
    assert body["bucket_id"] == str(bucket.pk) and body["hint_tags"] == ["pets"]
    assert body["enrichment"] == {"embedding": "ready", "lemmas": "ready", "context": "none"}


def test_edit_content_recomputes_derived_columns(api, bucket):
    [memory_id] = write(bucket, "I drive a red Toyota", api=api)
    before = Memory.objects.get(pk=memory_id)
    response = api.patch(f"/api/v1/memories/{memory_id}", {"content": "I drive a blue Tesla now"}, format="json")
    assert response.status_code == 200
    after = Memory.objects.get(pk=memory_id)
    assert after.content == "I drive a blue Tesla now"
    assert after.text_hash == text_hash("I drive a blue Tesla now") != before.text_hash
    assert "tesla" in after.text_lemmatized.split() and "toyota" not in after.text_lemmatized.split()
    assert after.token_count != before.token_count or after.text_lemmatized != before.text_lemmatized
    assert list(after.embedding) != list(before.embedding)


def test_edit_that_collides_with_another_memory_is_409(api, bucket):
    first, second = write(bucket, "I like jazz", "I like blues", api=api)
    response = api.patch(f"/api/v1/memories/{second}", {"content": "i like JAZZ!"}, format="json")
    assert response.status_code == 409
    assert response.json()["code"] == "duplicate_content" and response.json()["existing_id"] == first
    assert Memory.objects.get(pk=second).content == "I like blues"


def test_edit_other_fields(api, bucket):
    [memory_id] = write(bucket, "Meeting moved to Thursday", api=api)
    response = api.patch(
        f"/api/v1/memories/{memory_id}",
        {"hint_tags": ["work"], "attributed_to": "assistant", "metadata": {"k": 1}, "classified_scope": "specific"},
        format="json",
    )
    assert response.status_code == 200
    memory = Memory.objects.get(pk=memory_id)
    assert memory.hint_tags == ["work"] and memory.attributed_to == "assistant"
    assert memory.metadata == {"k": 1} and memory.classified_scope == "specific"


@pytest.mark.parametrize(
    "payload", [{"content": ""}, {"content": 5}, {"attributed_to": "bot"}, {"tenant_id": str(uuid.uuid4())}]
)
def test_bad_edit_is_400_and_changes_nothing(api, bucket, payload):
    [memory_id] = write(bucket, "unchanged", api=api)
    assert api.patch(f"/api/v1/memories/{memory_id}", payload, format="json").status_code == 400
    assert Memory.objects.get(pk=memory_id).content == "unchanged"


def test_delete_memory(api, bucket):
    keep, gone = write(bucket, "keep me", "delete me", api=api)
    assert api.delete(f"/api/v1/memories/{gone}").status_code == 204
    assert list(Memory.objects.values_list("id", flat=True)) == [uuid.UUID(keep)]
    assert api.get(f"/api/v1/memories/{gone}").status_code == 404


def test_list_is_paginated_newest_first(api, bucket):
    ids = write(bucket, *[f"memory {i}" for i in range(7)], api=api)
    page = api.get(f"/api/v1/buckets/{bucket.pk}/memories?page_size=3").json()
    assert [m["id"] for m in page["results"]] == ids[::-1][:3]
    seen = [m["id"] for m in page["results"]]
    while page["next"]:
        page = api.get(page["next"]).json()
        seen += [m["id"] for m in page["results"]]
    assert seen == ids[::-1]


def test_list_filters(api, bucket):
    write(
        bucket,
        {"content": "a", "hint_tags": ["x", "y"], "agent_id": "planner", "attributed_to": "user", "run_id": "r1"},
        {"content": "b", "hint_tags": ["x"], "agent_id": "executor", "attributed_to": "assistant"},
        {"content": "c", "created_at": "2020-01-01T00:00:00Z"},
        api=api,
    )

    def contents(query: str) -> set[str]:
        response = api.get(f"/api/v1/buckets/{bucket.pk}/memories?{query}")
        assert response.status_code == 200, response.content
        return {m["content"] for m in response.json()["results"]}

    assert contents("hint_tags=x") == {"a", "b"}
    assert contents("hint_tags=x,y") == {"a"}
    assert contents("agent_id=executor") == {"b"}
    assert contents("attributed_to=user") == {"a"}
    assert contents("run_id=r1") == {"a"}
    assert contents("created_before=2021-01-01T00:00:00Z") == {"c"}
    assert contents("created_after=2021-01-01T00:00:00Z") == {"a", "b"}
    assert contents("pending=true") == set()
    assert api.get(f"/api/v1/buckets/{bucket.pk}/memories?attributed_to=robot").status_code == 400
    assert api.get(f"/api/v1/buckets/{bucket.pk}/memories?bogus=1").status_code == 400


def test_restricted_token_cannot_reach_memories_of_other_buckets(api, client_factory, tenant, bucket):
    other = bucket_create(tenant=tenant, name="other")
    [memory_id] = write(other, "in the other bucket", api=api)
    restricted = client_factory(tenant, bucket=bucket)
    assert restricted.get(f"/api/v1/memories/{memory_id}").status_code == 404
    assert restricted.patch(f"/api/v1/memories/{memory_id}", {"content": "x"}, format="json").status_code == 404
    assert restricted.delete(f"/api/v1/memories/{memory_id}").status_code == 404
    assert restricted.get(f"/api/v1/buckets/{other.pk}/memories").status_code == 404
    assert Memory.objects.get(pk=memory_id).content == "in the other bucket"


class TestOutsider:
    def test_cannot_read_edit_delete_or_list(self, api, outsider_api, bucket):
        [memory_id] = write(bucket, "private fact", api=api)
        missing = outsider_api.get(f"/api/v1/memories/{uuid.uuid4()}")
        response = outsider_api.get(f"/api/v1/memories/{memory_id}")
        assert response.status_code == missing.status_code == 404
        assert response.json() == missing.json()
        assert outsider_api.patch(f"/api/v1/memories/{memory_id}", {"content": "x"}, format="json").status_code == 404
        assert outsider_api.delete(f"/api/v1/memories/{memory_id}").status_code == 404
        assert outsider_api.get(f"/api/v1/buckets/{bucket.pk}/memories").status_code == 404
        assert Memory.objects.get(pk=memory_id).content == "private fact"
