"""Memory blocks in an export and an import: ``?blocks=true`` (``export_bucket --blocks``) adds one
``{"block": {...}}`` line per block after the memories, and an import sets each block to its
line's text (a new version, recorded with the reason ``import``)."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from memories.models import BlockEdit, MemoryBlock
from memories.services.buckets import bucket_create
from tests.factories import export_lines, import_lines, make_client, write

pytestmark = pytest.mark.django_db


def put_block(api, bucket, label: str, content: str, agent_id: str | None = None, **extra):
    url = f"/api/v1/buckets/{bucket.pk}/blocks/{label}" + (f"?agent_id={agent_id}" if agent_id else "")
    answer = api.put(url, {"content": content, **extra}, format="json")
    assert answer.status_code in (200, 201), answer.content
    return answer


def blocks_of(bucket) -> dict:
    return {
        (b.agent_id, b.label): (b.content, b.max_tokens)
        for b in MemoryBlock.objects.for_bucket(bucket).order_by("agent_id", "label")
    }


@pytest.fixture
def filled(api, bucket):
    write(bucket, "Ana likes green tea.", "Ana's sister is called Marta.", api=api)
    put_block(api, bucket, "human", "Ana, a nurse in Porto. Prefers short answers.")
    put_block(api, bucket, "persona", "A calm, brief assistant.", max_tokens=64)
    put_block(api, bucket, "scratch", "Call the clinic on Monday.", agent_id="planner")
    return bucket


def test_an_export_lists_the_blocks_after_the_memories_only_when_asked(api, filled):
    plain = export_lines(api, filled)
    assert all("block" not in line for line in plain) and len(plain) == 2
    lines = export_lines(api, filled, blocks="true")
    assert [("block" in line) for line in lines] == [False, False, True, True, True]
    blocks = [line["block"] for line in lines[2:]]
    assert [(b["agent_id"], b["label"]) for b in blocks] == [(None, "human"), (None, "persona"), ("planner", "scratch")]
    assert blocks[1]["content"] == "A calm, brief assistant." and blocks[1]["max_tokens"] == 64


def test_blocks_round_trip_into_another_bucket_and_a_second_import_changes_nothing(api, filled, tenant):
    target = bucket_create(tenant=tenant, name="copy")
    lines = export_lines(api, filled, blocks="true")
    first = import_lines(api, target, lines)
    assert first.status_code == 200, first.content
    assert (first.json()["imported"], first.json()["blocks_imported"], first.json()["blocks_unchanged"]) == (2, 3, 0)
    assert blocks_of(target) == blocks_of(filled)
    edits = BlockEdit.objects.filter(
        tenant_id=tenant.pk, block_id__in=MemoryBlock.objects.for_bucket(target).values("id")
    )
    assert {e.reason for e in edits} == {"import"}
    again = import_lines(api, target, lines)
    assert (again.json()["deduplicated"], again.json()["blocks_imported"], again.json()["blocks_unchanged"]) == (
        2,
        0,
        3,
    )


def test_an_import_sets_an_existing_block_and_its_history_keeps_the_old_text(api, filled, tenant):
    target = bucket_create(tenant=tenant, name="copy")
    put_block(api, target, "human", "Someone else entirely.")
    answer = import_lines(api, target, [line for line in export_lines(api, filled, blocks="true") if "block" in line])
    assert answer.status_code == 200, answer.content
    human = MemoryBlock.objects.for_bucket(target).get(label="human", agent_id__isnull=True)
    assert human.content == "Ana, a nurse in Porto. Prefers short answers." and human.version == 2
    history = api.get(f"/api/v1/buckets/{target.pk}/blocks/human/history").json()["results"]
    assert [v["content"] for v in history] == [human.content, "Someone else entirely."]


@pytest.mark.parametrize(
    ("block", "field"),
    [
        ({"label": "Bad Label", "content": "x", "max_tokens": 10}, "label"),
        ({"label": "human", "content": "word " * 50, "max_tokens": 5}, "content"),
        ({"label": "human", "content": "x", "max_tokens": 0}, "max_tokens"),
        ({"label": "human", "content": "x"}, "max_tokens"),
        ({"label": "human", "content": "x", "max_tokens": 10, "colour": "red"}, "colour"),
    ],
)
def test_a_bad_block_line_refuses_the_import_and_writes_nothing(api, bucket, block, field):
    answer = import_lines(api, bucket, [{"content": "A memory beside it."}, {"block": block}])
    assert answer.status_code == 400, answer.content
    assert answer.json()["code"] == "invalid_lines"
    assert field in json.dumps(answer.json()["rejected"])
    assert blocks_of(bucket) == {}
    assert export_lines(api, bucket) == []


def test_a_token_held_to_an_agent_exports_and_imports_its_own_blocks_only(tenant, filled):
    planner = make_client(tenant, scopes=("read", "write"), agent_ids=["planner"])
    lines = export_lines(planner, filled, blocks="true")
    assert [line["block"]["label"] for line in lines if "block" in line] == ["scratch"]
    target = bucket_create(tenant=tenant, name="copy")
    shared = {"block": {"label": "human", "agent_id": None, "content": "Not yours.", "max_tokens": 100}}
    refused = import_lines(planner, target, [*lines, shared])
    assert refused.status_code == 400, refused.content
    assert "held to agents" in refused.json()["rejected"][0]["detail"]
    assert blocks_of(target) == {}
    accepted = import_lines(planner, target, lines)
    assert accepted.status_code == 200, accepted.content
    assert blocks_of(target) == {("planner", "scratch"): ("Call the clinic on Monday.", 2048)}


def test_another_tenant_cannot_export_or_import_a_buckets_blocks(filled, outsider_api):
    assert outsider_api.get(f"/api/v1/buckets/{filled.pk}/export", {"blocks": "true"}).status_code == 404
    line = {"block": {"label": "human", "content": "Overwritten.", "max_tokens": 100}}
    assert import_lines(outsider_api, filled, [line]).status_code == 404
    assert blocks_of(filled)[(None, "human")][0] == "Ana, a nurse in Porto. Prefers short answers."


def test_the_export_command_writes_the_blocks_with_its_flag(filled, tmp_path):
    out = tmp_path / "bucket.jsonl"
    call_command("export_bucket", str(filled.pk), "--out", str(out), "--blocks", "--no-progress")
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert sum("block" in line for line in lines) == 3
