"""Bad input gets a clear 400 (or 404) and writes nothing from that request."""

from __future__ import annotations

import uuid

import pytest

from memories.apis.memories import MAX_BATCH
from memories.models import Memory
from memories.serializers import MAX_CONTENT_CHARS, MAX_TAGS

pytestmark = pytest.mark.django_db

GOOD = {"content": "a valid memory"}

BAD_SINGLE = {
    "missing content": {"attributed_to": "user"},
    "empty content": {"content": ""},
    "whitespace content": {"content": "   \n\t "},
    "null content": {"content": None},
    "number content": {"content": 42},
    "list content": {"content": ["a"]},
    "content too long": {"content": "x" * (MAX_CONTENT_CHARS + 1)},
    "NUL byte": {"content": "before\x00after"},
    "bad attribution": {"content": "ok", "attributed_to": "system"},
    "tags not a list": {"content": "ok", "hint_tags": "travel"},
    "tag not a string": {"content": "ok", "hint_tags": ["ok", 3]},
    "empty tag": {"content": "ok", "hint_tags": [""]},
    "too many tags": {"content": "ok", "hint_tags": [f"t{i}" for i in range(MAX_TAGS + 1)]},
    "metadata not an object": {"content": "ok", "metadata": ["a", "b"]},
    "metadata a string": {"content": "ok", "metadata": "meta"},
    "metadata too large": {"content": "ok", "metadata": {"blob": "x" * 20_000}},
    "bad created_at": {"content": "ok", "created_at": "last tuesday"},
    # Stored times are years 1900 to 2200 (UTC): the console's date drill-down broke at 9999.
    "created_at at the calendar's end": {"content": "ok", "created_at": "9999-12-31T23:59:59Z"},
    "created_at after 2200": {"content": "ok", "created_at": "2201-01-01T00:00:00Z"},
    "created_at before 1900": {"content": "ok", "created_at": "1899-12-31T23:59:59Z"},
    "created_at before 1900 in UTC": {"content": "ok", "created_at": "1900-01-01T00:30:00+01:00"},
    "created_at at the calendar's start": {"content": "ok", "created_at": "0001-01-01T00:30:00+01:00"},
    "unknown field": {"content": "ok", "atributed_to": "user"},
    "agent_id not a string": {"content": "ok", "agent_id": {"a": 1}},
    "reserved metadata key": {"content": "ok", "metadata": {"_engram_links": []}},
}


@pytest.mark.parametrize("payload", list(BAD_SINGLE.values()), ids=list(BAD_SINGLE))
def test_bad_single_memory_is_400_and_writes_nothing(api, bucket, payload):
    response = api.post(f"/api/v1/buckets/{bucket.pk}/memories", payload, format="json")
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "invalid" and body["detail"]
    assert not Memory.objects.exists()


@pytest.mark.parametrize("payload", list(BAD_SINGLE.values()), ids=list(BAD_SINGLE))
def test_one_bad_item_rejects_the_whole_batch(api, bucket, payload):
    response = api.post(
        f"/api/v1/buckets/{bucket.pk}/memories", {"memories": [GOOD, payload, {"content": "also ok"}]}, format="json"
    )
    assert response.status_code == 400
    errors = response.json()["errors"]["memories"]
    assert list(errors) == ["1"] and errors["1"]  # points at the bad item only
    assert response.json()["detail"].startswith("memories.1.")
    assert not Memory.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        {"memories": []},
        {"memories": "not a list"},
        {"memories": [GOOD] * (MAX_BATCH + 1)},
        {"memories": ["just a string"]},
        {"memories": [GOOD], "sequence": "maybe"},
        [GOOD],
        "a string",
        42,
    ],
    ids=["empty batch", "memories not a list", "oversized batch", "item not an object", "bad sequence flag",
         "bare list", "bare string", "bare number"],
)  # fmt: skip
def test_bad_batch_shapes_are_400(api, bucket, body):
    response = api.post(f"/api/v1/buckets/{bucket.pk}/memories", body, format="json")
    assert response.status_code == 400
    assert not Memory.objects.exists()


@pytest.mark.parametrize("raw", [b"{not json", b'{"content": "unterminated', b"\xff\xfe\x00garbage", b""])
def test_malformed_json_is_400(api, bucket, raw):
    response = api.post(f"/api/v1/buckets/{bucket.pk}/memories", data=raw, content_type="application/json")
    assert response.status_code == 400
    assert not Memory.objects.exists()


def test_wrong_content_type_is_415(api, bucket):
    response = api.post(f"/api/v1/buckets/{bucket.pk}/memories", data="content=x", content_type="text/plain")
    assert response.status_code == 415
    assert not Memory.objects.exists()


def test_unknown_bucket_is_404(api):
    response = api.post(f"/api/v1/buckets/{uuid.uuid4()}/memories", GOOD, format="json")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert not Memory.objects.exists()


def test_content_at_the_limit_is_accepted(api, bucket):
    response = api.post(f"/api/v1/buckets/{bucket.pk}/memories", {"content": "y" * MAX_CONTENT_CHARS}, format="json")
    assert response.status_code == 201


@pytest.mark.parametrize("created_at", ["1900-01-01T00:00:00Z", "2200-12-31T23:59:59.999999Z"])
def test_created_at_at_the_ends_of_the_stored_range_is_accepted(api, bucket, created_at):
    response = api.post(f"/api/v1/buckets/{bucket.pk}/memories", {**GOOD, "created_at": created_at}, format="json")
    assert response.status_code == 201, response.content


@pytest.mark.parametrize("created_at", ["9999-12-31T23:59:59Z", "1899-12-31T23:59:59Z"])
def test_patch_with_created_at_out_of_range_is_400_and_changes_nothing(api, bucket, created_at):
    memory_id = api.post(f"/api/v1/buckets/{bucket.pk}/memories", GOOD, format="json").json()["results"][0]["id"]
    before = Memory.objects.get(pk=memory_id).created_at
    response = api.patch(f"/api/v1/memories/{memory_id}", {"created_at": created_at}, format="json")
    assert response.status_code == 400, response.content
    assert "created_at" in response.json()["errors"]
    assert Memory.objects.get(pk=memory_id).created_at == before
