"""The console's memory blocks page: a bucket's blocks, saved on the version the form showed,
created, and each block's history."""

from __future__ import annotations

import pytest
from django.test import Client

from memories.models import BlockEdit, MemoryBlock, MemoryEvent
from memories.services.blocks import BlockPatch, Expected, block_patch, block_put
from tests.factories import make_operator

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(tenant) -> Client:
    client = Client()
    client.force_login(make_operator("blocks-operator", tenant))
    return client


def page(bucket):
    return f"/admin/console/blocks/{bucket.pk}/"


def test_the_page_lists_the_buckets_blocks_and_the_index_counts_them(operator, bucket, other_bucket):
    block_put(bucket=bucket, agent_id=None, label="persona", content="I am terse.", expected=Expected())
    block_put(bucket=bucket, agent_id="alfa", label="human", content="Ana likes figs.", expected=Expected())
    block_put(bucket=other_bucket, agent_id=None, label="persona", content="Not ours.", expected=Expected())
    shown = operator.get(page(bucket)).content.decode()
    assert "I am terse." in shown and "Ana likes figs." in shown and "Not ours." not in shown
    index = operator.get("/admin/console/blocks/")
    assert index.status_code == 200 and bucket.name in index.content.decode()
    assert operator.get(page(other_bucket)).status_code == 404


def test_a_save_on_the_version_shown_is_kept_with_the_operator_and_reason(operator, bucket):
    block, _ = block_put(bucket=bucket, agent_id=None, label="persona", content="v1", expected=Expected())
    form = {"label": "persona", "agent_id": "", "etag": block.etag, "content": "v2 from the console",
            "reason": "tidied", "max_tokens": "100"}  # fmt: skip
    response = operator.post(page(bucket), form)
    assert response.status_code == 302
    block = MemoryBlock.objects.get(pk=block.pk)
    assert (block.content, block.version, block.max_tokens) == ("v2 from the console", 2, 100)
    edit = BlockEdit.objects.get(block_id=block.pk, version=2)
    assert (edit.actor_kind, edit.actor_label, edit.reason) == ("operator", "blocks-operator", "tidied")
    # The change feed says the same: a block_updated event naming the operator and the reason.
    event = MemoryEvent.objects.filter(block_id=block.pk, kind="block_updated").get()
    assert event.payload["actor"]["kind"] == "operator" and event.payload["actor"]["label"] == "blocks-operator"
    assert (event.payload["reason"], event.payload["version"], event.payload["fields"]) == (
        "tidied", 2, ["content", "max_tokens"]
    )  # fmt: skip


def test_a_stale_form_saves_nothing_and_says_so(operator, bucket):
    block, _ = block_put(bucket=bucket, agent_id=None, label="persona", content="v1", expected=Expected())
    shown = block.etag
    block_patch(bucket=bucket, agent_id=None, label="persona", patch=BlockPatch(append="an agent's line"),
                expected=Expected(any=True))  # fmt: skip
    response = operator.post(page(bucket), {"label": "persona", "etag": shown, "content": "the operator's text"},
                             follow=True)  # fmt: skip
    assert "Nothing saved" in response.content.decode() and "version 2" in response.content.decode()
    assert MemoryBlock.objects.get(pk=block.pk).content == "v1\nan agent's line"


def test_a_new_block_is_created_and_a_label_taken_meanwhile_is_not_overwritten(operator, bucket):
    operator.post(page(bucket), {"label": "goals", "agent_id": "alfa", "content": "Grow plums."})
    assert MemoryBlock.objects.get(label="goals").agent_id == "alfa"
    response = operator.post(page(bucket), {"label": "goals", "agent_id": "alfa", "content": "Other."}, follow=True)
    assert "Nothing saved" in response.content.decode()
    assert MemoryBlock.objects.get(label="goals").content == "Grow plums."


def test_over_the_limit_nothing_is_saved(operator, bucket):
    response = operator.post(page(bucket), {"label": "tiny", "content": "far too many words " * 5, "max_tokens": "3"},
                             follow=True)  # fmt: skip
    assert "block_too_long" in response.content.decode() or "over its limit" in response.content.decode()
    assert not MemoryBlock.objects.exists()


def test_history_shows_every_version(operator, bucket):
    block, _ = block_put(bucket=bucket, agent_id=None, label="persona", content="first", reason="zq-first-meeting",
                         expected=Expected())  # fmt: skip
    block_patch(bucket=bucket, agent_id=None, label="persona", patch=BlockPatch(append="second"),
                reason="zq-learned-more", expected=Expected(any=True))  # fmt: skip
    shown = operator.get(f"/admin/console/blocks/{bucket.pk}/{block.pk}/history/").content.decode()
    assert shown.index("zq-learned-more") < shown.index("zq-first-meeting")  # newest first
