"""Memory blocks through the API: create, read, conditional writes (ETag / If-Match), the token
limit, history, deletion, agents, and the outsider (docs/API.md, "Memory blocks")."""

from __future__ import annotations

import pytest

from audit.models import AuditEvent
from memories.models import BlockEdit, MemoryBlock
from memories.services.blocks import block_tokens
from tests.factories import make_client

pytestmark = pytest.mark.django_db


def url(bucket, label="persona", suffix=""):
    return f"/api/v1/buckets/{bucket.pk}/blocks/{label}{suffix}"


def put(api, bucket, content, label="persona", etag=None, **body):
    headers = {"HTTP_IF_MATCH": etag} if etag else {}
    return api.put(url(bucket, label), {"content": content, **body}, format="json", **headers)


def patch(api, bucket, body, etag, label="persona", query=""):
    headers = {"HTTP_IF_MATCH": etag} if etag else {}
    return api.patch(url(bucket, label) + query, body, format="json", **headers)


def test_put_without_if_match_creates_the_block_at_version_one_with_its_etag(api, bucket):
    response = put(api, bucket, "I am a careful gardener.", reason="first words")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["version"] == 1 and body["agent_id"] is None and body["label"] == "persona"
    assert response["ETag"] == body["etag"]
    assert body["token_count"] == block_tokens("I am a careful gardener.") > 0
    got = api.get(url(bucket))
    assert got.status_code == 200 and got.json()["content"] == "I am a careful gardener."
    assert got["ETag"] == body["etag"]


def test_a_change_needs_if_match_and_a_stale_one_is_412_changing_nothing(api, bucket):
    etag = put(api, bucket, "v1 text").json()["etag"]
    # No If-Match on an existing block: 428, nothing changes.
    refused = put(api, bucket, "overwrite blindly")
    assert refused.status_code == 428 and refused.json()["code"] == "precondition_required"
    assert refused.json()["etag"] == etag
    assert patch(api, bucket, {"append": "x"}, None).status_code == 428
    assert api.delete(url(bucket)).status_code == 428
    second = put(api, bucket, "v2 text", etag=etag)
    assert second.status_code == 200 and second.json()["version"] == 2
    stale = put(api, bucket, "v3 from a stale read", etag=etag)
    assert stale.status_code == 412 and stale.json()["code"] == "precondition_failed"
    assert stale.json()["version"] == 2 and stale.json()["etag"] == second.json()["etag"]
    assert patch(api, bucket, {"append": "x"}, etag).status_code == 412
    assert api.delete(url(bucket), HTTP_IF_MATCH=etag).status_code == 412
    block = MemoryBlock.objects.get(bucket=bucket)
    assert (block.content, block.version) == ("v2 text", 2)
    assert BlockEdit.objects.filter(block_id=block.pk).count() == 2


def test_if_none_match_star_creates_only_a_missing_block(api, bucket):
    first = api.put(url(bucket), {"content": "one"}, format="json", HTTP_IF_NONE_MATCH="*")
    assert first.status_code == 201
    again = api.put(url(bucket), {"content": "two"}, format="json", HTTP_IF_NONE_MATCH="*")
    assert again.status_code == 412
    assert MemoryBlock.objects.get(bucket=bucket).content == "one"


def test_if_match_on_a_missing_block_is_412_and_creates_nothing(api, bucket):
    assert put(api, bucket, "text", etag="*").status_code == 412
    assert put(api, bucket, "text", etag='"00000000-0000-0000-0000-000000000000.1"').status_code == 412
    assert not MemoryBlock.objects.filter(bucket=bucket).exists()


def test_an_etag_of_a_deleted_block_never_matches_the_block_made_again(api, bucket):
    old = put(api, bucket, "old").json()["etag"]
    assert api.delete(url(bucket), HTTP_IF_MATCH=old).status_code == 204
    new = put(api, bucket, "new").json()
    assert new["version"] == 1 and new["etag"] != old
    assert put(api, bucket, "from the old read", etag=old).status_code == 412
    assert MemoryBlock.objects.get(bucket=bucket).content == "new"


def test_patch_appends_replaces_and_sets_the_limit(api, bucket):
    etag = put(api, bucket, "Name: Ana.").json()["etag"]
    appended = patch(api, bucket, {"append": "Likes figs.", "reason": "she said so"}, etag)
    assert appended.status_code == 200 and appended.json()["content"] == "Name: Ana.\nLikes figs."
    replaced = patch(api, bucket, {"replace": "figs", "replace_with": "plums"}, appended.json()["etag"])
    assert replaced.json()["content"] == "Name: Ana.\nLikes plums." and replaced.json()["version"] == 3
    missing = patch(api, bucket, {"replace": "figs", "replace_with": "x"}, replaced.json()["etag"])
    assert missing.status_code == 409 and missing.json()["code"] == "replace_text_missing"
    limited = patch(api, bucket, {"max_tokens": 50}, replaced.json()["etag"])
    assert limited.json()["max_tokens"] == 50 and limited.json()["content"] == "Name: Ana.\nLikes plums."


def test_appends_with_if_match_star_both_land(api, bucket):
    put(api, bucket, "start")
    assert patch(api, bucket, {"append": "one"}, "*").status_code == 200
    assert patch(api, bucket, {"append": "two"}, "*").status_code == 200
    block = MemoryBlock.objects.get(bucket=bucket)
    assert block.content == "start\none\ntwo" and block.version == 3


@pytest.mark.parametrize("body", [{}, {"content": "a", "append": "b"}, {"replace": "a"}, {"nonsense": 1}])
def test_a_patch_that_says_no_one_change_is_400(api, bucket, body):
    put(api, bucket, "a")
    assert patch(api, bucket, body, "*").status_code == 400
    assert MemoryBlock.objects.get(bucket=bucket).version == 1


def test_text_over_the_token_limit_is_400_and_changes_nothing(api, bucket):
    long_text = "word " * 40
    created = put(api, bucket, "a short note", max_tokens=10)
    assert created.status_code == 201
    refused = put(api, bucket, long_text, etag=created.json()["etag"])
    assert refused.status_code == 400 and refused.json()["code"] == "block_too_long"
    assert refused.json()["max_tokens"] == 10 and refused.json()["token_count"] == block_tokens(long_text)
    assert patch(api, bucket, {"append": long_text}, "*").json()["code"] == "block_too_long"
    # Lowering the limit under the text is refused too.
    assert patch(api, bucket, {"max_tokens": 1}, "*").status_code == 400
    too_long_new = put(api, bucket, long_text, label="human", max_tokens=5)
    assert too_long_new.status_code == 400
    block = MemoryBlock.objects.get(bucket=bucket)
    assert (block.label, block.content, block.version, block.max_tokens) == ("persona", "a short note", 1, 10)
    assert BlockEdit.objects.filter(bucket=bucket).count() == 1


def test_a_text_exactly_at_the_limit_is_accepted(api, bucket):
    text = "the quick brown fox jumps over the lazy dog"
    assert put(api, bucket, text, max_tokens=block_tokens(text)).status_code == 201


@pytest.mark.parametrize("label", ["Persona", "-lead", "a b", "x" * 65, "caf%C3%A9"])
def test_a_label_that_is_not_a_slug_is_refused(api, bucket, label):
    response = put(api, bucket, "text", label=label)
    assert response.status_code == 400 and response.json()["code"] == "invalid_label"
    assert api.get(url(bucket, label)).status_code == 404
    assert not MemoryBlock.objects.exists()


def test_history_lists_every_version_newest_first_with_who_and_why(api, bucket):
    etag = put(api, bucket, "first", reason="met her").json()["etag"]
    patch(api, bucket, {"append": "second", "reason": "learned more"}, etag)
    history = api.get(url(bucket, suffix="/history"))
    assert history.status_code == 200
    rows = history.json()["results"]
    assert [r["version"] for r in rows] == [2, 1]
    assert [r["reason"] for r in rows] == ["learned more", "met her"]
    assert [r["change"] for r in rows] == ["edited", "created"]
    assert rows[0]["content"] == "first\nsecond" and rows[1]["content"] == "first"
    assert rows[0]["actor"] == {"kind": "token", "id": str(api.token.pk), "label": api.token.prefix}
    actions = AuditEvent.objects.filter(object_type="block").order_by("id").values_list("action", flat=True)
    assert list(actions) == ["block.create", "block.update"]


def test_list_shows_the_shared_blocks_then_each_agents(api, bucket):
    put(api, bucket, "shared human", label="human")
    api.put(url(bucket) + "?agent_id=alfa", {"content": "alfa persona"}, format="json")
    put(api, bucket, "shared persona")
    rows = api.get(f"/api/v1/buckets/{bucket.pk}/blocks").json()["results"]
    assert [(r["agent_id"], r["label"]) for r in rows] == [(None, "human"), (None, "persona"), ("alfa", "persona")]
    only = api.get(f"/api/v1/buckets/{bucket.pk}/blocks", {"agent_id": "alfa"}).json()["results"]
    assert [r["content"] for r in only] == ["alfa persona"]


def test_an_agents_block_and_the_shared_one_are_separate(api, bucket):
    put(api, bucket, "shared")
    assert api.put(url(bucket) + "?agent_id=alfa", {"content": "alfa's"}, format="json").status_code == 201
    assert api.get(url(bucket)).json()["content"] == "shared"
    assert api.get(url(bucket) + "?agent_id=alfa").json()["content"] == "alfa's"
    assert api.get(url(bucket) + "?agent_id=beta").status_code == 404


def test_a_token_held_to_an_agent_reads_and_writes_its_own_blocks_only(tenant, api, bucket):
    put(api, bucket, "shared text")
    api.put(url(bucket) + "?agent_id=beta", {"content": "beta's secret"}, format="json")
    alfa = make_client(tenant, agent_ids=["alfa"], include_shared=True)
    assert alfa.put(url(bucket) + "?agent_id=alfa", {"content": "mine"}, format="json").status_code == 201
    assert alfa.get(url(bucket) + "?agent_id=beta").status_code == 404
    hidden = alfa.patch(url(bucket) + "?agent_id=beta", {"append": "x"}, format="json", HTTP_IF_MATCH="*")
    assert hidden.status_code == 404
    forbidden = alfa.put(url(bucket) + "?agent_id=beta", {"content": "x"}, format="json", HTTP_IF_MATCH="*")
    assert forbidden.status_code == 403 and forbidden.json()["code"] == "agent_forbidden"
    # The shared block: readable (include_shared), not writable.
    assert alfa.get(url(bucket)).json()["content"] == "shared text"
    assert alfa.put(url(bucket), {"content": "x"}, format="json", HTTP_IF_MATCH="*").status_code == 403
    listed = alfa.get(f"/api/v1/buckets/{bucket.pk}/blocks").json()["results"]
    assert sorted((r["agent_id"] or "", r["content"]) for r in listed) == [("", "shared text"), ("alfa", "mine")]
    assert MemoryBlock.objects.get(agent_id="beta").content == "beta's secret"
    assert MemoryBlock.objects.get(agent_id=None).content == "shared text"


def test_another_tenants_bucket_is_404_and_nothing_is_written(outsider_api, api, bucket):
    put(api, bucket, "ours")
    assert outsider_api.get(url(bucket)).status_code == 404
    assert outsider_api.put(url(bucket), {"content": "theirs"}, format="json", HTTP_IF_MATCH="*").status_code == 404
    assert outsider_api.get(f"/api/v1/buckets/{bucket.pk}/blocks").status_code == 404
    assert MemoryBlock.objects.get(bucket=bucket).content == "ours"


def test_a_read_token_cannot_write_and_a_write_token_gets_no_content_back(tenant, api, bucket):
    put(api, bucket, "someone else's words")
    reader = make_client(tenant, scopes=("read",))
    assert reader.put(url(bucket), {"content": "x"}, format="json", HTTP_IF_MATCH="*").status_code == 403
    writer = make_client(tenant, scopes=("write",))
    response = writer.patch(url(bucket), {"append": "more"}, format="json", HTTP_IF_MATCH="*")
    assert response.status_code == 200 and "content" not in response.json() and response.json()["version"] == 2
    assert writer.get(url(bucket)).status_code == 403


def test_deleting_a_bucket_deletes_its_blocks_and_history(admin_api, api, bucket):
    put(api, bucket, "text")
    assert admin_api.delete(f"/api/v1/buckets/{bucket.pk}").status_code == 204
    assert not MemoryBlock.objects.exists() and not BlockEdit.objects.exists()


def test_erasing_an_agent_erases_its_blocks_and_history_and_keeps_the_others(tenant, admin_api, api, bucket):
    api.put(url(bucket) + "?agent_id=alfa", {"content": "alfa likes figs", "reason": "alfa told me"}, format="json")
    api.put(url(bucket) + "?agent_id=beta", {"content": "beta likes plums"}, format="json")
    put(api, bucket, "shared")
    preview = admin_api.post("/api/v1/erasure", {"agent_id": "alfa", "dry_run": True}, format="json").json()
    assert (preview["blocks"], preview["block_versions"]) == (1, 1) and MemoryBlock.objects.count() == 3
    report = admin_api.post("/api/v1/erasure", {"agent_id": "alfa"}, format="json")
    assert report.status_code == 200, report.content
    assert (report.json()["blocks"], report.json()["block_versions"]) == (1, 1)
    assert sorted(MemoryBlock.objects.values_list("content", flat=True)) == ["beta likes plums", "shared"]
    assert not BlockEdit.objects.filter(content__contains="alfa").exists()
    details = list(AuditEvent.objects.filter(action="block.create").values_list("details", flat=True))
    assert not any("alfa told me" in str(d) for d in details)


def test_an_erasure_narrowed_to_a_run_keeps_the_agents_blocks(admin_api, api, bucket):
    api.put(url(bucket) + "?agent_id=alfa", {"content": "alfa's persona"}, format="json")
    report = admin_api.post("/api/v1/erasure", {"agent_id": "alfa", "run_id": "r1"}, format="json").json()
    assert report["blocks"] == 0 and MemoryBlock.objects.filter(agent_id="alfa").exists()


def test_a_bucket_merge_moves_the_blocks_and_keeps_both_texts_of_a_label_in_both(tenant, admin_api, api, bucket):
    from memories.services.buckets import bucket_create

    target = bucket_create(tenant=tenant, name="target")
    put(api, bucket, "source persona")
    put(api, bucket, "source human", label="human")
    put(api, target, "target persona")
    merged = admin_api.post(f"/api/v1/buckets/{bucket.pk}/merge", {"target_bucket_id": str(target.pk)}, format="json")
    assert merged.status_code == 200, merged.content
    rows = sorted(MemoryBlock.objects.filter(bucket=target).values_list("label", "content"))
    suffix = f"-from-{bucket.pk.hex[:8]}"
    assert rows == [("human", "source human"), ("persona", "target persona"), (f"persona{suffix}", "source persona")]
    assert not MemoryBlock.objects.filter(bucket=bucket).exists()
    assert BlockEdit.objects.filter(bucket=target).count() == 3
