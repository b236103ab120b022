"""The MCP tools get_blocks and edit_block, run in process over the SDK's in-memory transport on
a client whose requests are answered by the real API (Django's test client, on the test
database): what an agent sees when it reads its blocks, edits them, and loses a race.

The requests are answered on the event loop (Django gives that context a connection of its own),
so the test's rows are committed (a transactional test) for them to see."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from django.db import connections
from engram_client import AsyncEngram
from engram_client.mcp import create_server
from mcp import Client

from memories.models import BlockEdit, MemoryBlock
from tests.factories import make_client

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _api_on_the_event_loops_thread(monkeypatch):
    # The tools' requests are answered synchronously on the event loop; Django refuses database
    # calls there unless told this is meant (the loop runs nothing else meanwhile).
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def through(api) -> httpx.MockTransport:
    """Each request of the client, sent to the API by Django's test client."""

    def answer(request: httpx.Request) -> httpx.Response:
        path = request.url.path + (f"?{request.url.query.decode()}" if request.url.query else "")
        wanted = ("if-match", "if-none-match")
        headers = {name: value for name, value in request.headers.items() if name.lower() in wanted}
        response = api.generic(
            request.method, path, request.content or b"", content_type="application/json", headers=headers
        )
        connections.close_all()  # the loop's own connection, not left open past the test
        return httpx.Response(response.status_code, headers=dict(response.items()), content=response.content)

    return httpx.MockTransport(answer)


def call(api, bucket, tool: str, arguments: dict) -> tuple[bool, dict | str]:
    transport = through(api)

    async def scenario():
        engram = AsyncEngram("http://engram.test", "egm_t", transport=transport, retries=0)
        async with engram, Client(create_server(lambda ctx: engram, default_bucket=str(bucket.pk))) as mcp:
            return await mcp.call_tool(tool, arguments)

    result = asyncio.run(scenario())
    text = result.content[0].text
    return result.is_error, (text if result.is_error else json.loads(text))


def test_an_agent_appends_to_a_new_block_reads_it_and_replaces_a_part(api, bucket):
    refused, made = call(api, bucket, "edit_block", {"label": "human", "append": "Name: Ana.", "reason": "she said"})
    assert not refused, made
    assert (made["version"], made["content"]) == (1, "Name: Ana.")
    refused, more = call(api, bucket, "edit_block", {"label": "human", "append": "Likes figs."})
    assert more["content"] == "Name: Ana.\nLikes figs." and more["version"] == 2
    refused, changed = call(api, bucket, "edit_block", {"label": "human", "replace": "figs", "replace_with": "plums"})
    assert not refused and changed["content"] == "Name: Ana.\nLikes plums."
    refused, read = call(api, bucket, "get_blocks", {"labels": ["human"]})
    assert read["blocks"] == [
        {"label": "human", "content": "Name: Ana.\nLikes plums.", "tokens": changed["tokens"], "max_tokens": 2048,
         "version": 3, "etag": changed["etag"]}
    ]  # fmt: skip
    assert list(BlockEdit.objects.order_by("version").values_list("reason", flat=True)) == ["she said", "", ""]


def test_a_whole_text_change_needs_the_etag_and_a_stale_one_is_refused_with_the_current_one(api, bucket):
    call(api, bucket, "edit_block", {"label": "persona", "content": "I am terse."})
    _, read = call(api, bucket, "get_blocks", {})
    [block] = read["blocks"]
    refused, message = call(api, bucket, "edit_block", {"label": "persona", "content": "I am chatty."})
    assert refused and "etag" in message and block["etag"] in message
    refused, done = call(
        api, bucket, "edit_block", {"label": "persona", "content": "I am warm.", "etag": block["etag"]}
    )
    assert not refused and done["version"] == 2
    refused, message = call(api, bucket, "edit_block", {"label": "persona", "content": "Stale.", "etag": block["etag"]})
    assert refused and "changed since you read it" in message and done["etag"] in message
    assert MemoryBlock.objects.get(label="persona").content == "I am warm."


def test_over_the_limit_the_tool_says_so_and_nothing_changes(api, bucket):
    call(api, bucket, "edit_block", {"label": "persona", "content": "Short.", "max_tokens": 5})
    refused, message = call(api, bucket, "edit_block", {"label": "persona", "append": "far too many words " * 5})
    assert refused and "block_too_long" in message
    assert MemoryBlock.objects.get(label="persona").content == "Short."


def test_get_blocks_for_an_agent_gives_its_own_and_the_shared_ones(tenant, api, bucket):
    call(api, bucket, "edit_block", {"label": "human", "content": "Shared."})
    call(api, bucket, "edit_block", {"label": "persona", "content": "Alfa.", "agent_id": "alfa"})
    call(api, bucket, "edit_block", {"label": "persona", "content": "Beta.", "agent_id": "beta"})
    _, read = call(api, bucket, "get_blocks", {"agent_id": "alfa"})
    assert [(b["label"], b.get("agent_id"), b["content"]) for b in read["blocks"]] == [
        ("human", None, "Shared."),
        ("persona", "alfa", "Alfa."),
    ]
    held = make_client(tenant, agent_ids=["alfa"])
    _, mine = call(held, bucket, "get_blocks", {})
    assert [b["content"] for b in mine["blocks"]] == ["Alfa."]
    refused, message = call(held, bucket, "edit_block", {"label": "persona", "append": "x", "agent_id": "beta"})
    assert refused and "agent_forbidden" in message
