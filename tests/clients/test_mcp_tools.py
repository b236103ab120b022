"""What the MCP tools send to the API and how they read its answer, without a server: the
tools run in process over the SDK's in-memory transport, on a client whose transport records
each request and answers as the API would (the live behaviour is tests/clients/test_mcp_http.py's
and test_mcp_stdio.py's)."""

from __future__ import annotations

import asyncio
import json

import httpx
from engram_client import AsyncEngram
from engram_client.mcp import create_server
from mcp import Client

MAIN = "3f1c0d6e-2b7a-4c1e-9a55-0d2b8f6a1e01"
NOTES = "8a4b2c1d-5e6f-4a3b-8c7d-9e0f1a2b3c4d"
LONG = "6d5c4b3a-2e1f-4d0c-9b8a-7f6e5d4c3b2a"


def api(requests: list[httpx.Request]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        if request.url.path == "/api/v1/buckets":
            buckets = [{"id": MAIN, "name": "main"}, {"id": NOTES, "name": "notes"}]
            return httpx.Response(200, json={"results": buckets, "next": None})
        hit = {
            "id": LONG, "content": "…fed with rye flour every Sunday.", "score": 0.5,
            "created_at": "2026-01-02T03:04:05Z", "excerpt": {"start": 900, "end": 934}, "superseded": False,
        }  # fmt: skip
        if request.url.path == "/api/v1/search":
            hit["bucket_id"] = NOTES
            return httpx.Response(
                200, json={"results": [hit], "warnings": [], "buckets": [{"id": NOTES, "name": "notes"}]}
            )
        return httpx.Response(200, json={"results": [hit], "warnings": []})

    return httpx.MockTransport(answer)


def run(arguments: dict, *, default_bucket=None) -> tuple[list[httpx.Request], bool, dict | str]:
    requests: list[httpx.Request] = []

    async def scenario():
        engram = AsyncEngram("http://engram.test", "egm_t", transport=api(requests))
        async with engram, Client(create_server(lambda ctx: engram, default_bucket=default_bucket)) as mcp:
            return await mcp.call_tool("search_memories", arguments)

    result = asyncio.run(scenario())
    text = result.content[0].text
    return requests, result.is_error, (text if result.is_error else json.loads(text))


def test_search_memories_passes_excerpt_and_marks_a_passage_result():
    requests, refused, found = run({"query": "flour", "bucket": MAIN, "excerpt": "passage", "token_budget": 50})
    assert not refused, found
    [search] = requests
    assert search.url.path == f"/api/v1/buckets/{MAIN}/search"
    assert json.loads(search.content) == {"query": "flour", "limit": 10, "token_budget": 50, "excerpt": "passage"}
    assert found["results"] == [
        {"id": LONG, "content": "…fed with rye flour every Sunday.", "date": "2026-01-02T03:04:05Z", "score": 0.5,
         "excerpt": True},
    ]  # fmt: skip


def test_search_memories_refuses_an_excerpt_the_api_does_not_know():
    requests, refused, message = run({"query": "flour", "bucket": MAIN, "excerpt": "half"})
    assert refused and "excerpt" in message
    assert requests == []


def test_search_memories_across_buckets_names_them_by_id_in_one_request():
    requests, refused, found = run({"query": "flour", "buckets": ["notes", MAIN, "main"]})
    assert not refused, found
    listing, search = requests
    assert listing.url.path == "/api/v1/buckets"  # the names, looked up once
    assert search.url.path == "/api/v1/search"
    assert json.loads(search.content)["buckets"] == [NOTES, MAIN]  # in order, each once
    assert found["results"][0]["bucket"] == NOTES and found["buckets"] == [{"id": NOTES, "name": "notes"}]


def test_search_memories_over_every_bucket_sends_no_list():
    requests, refused, _ = run({"query": "flour", "buckets": ["*"]})
    [search] = requests
    assert not refused and "buckets" not in json.loads(search.content)


def test_the_default_bucket_may_be_chosen_per_call():
    chosen = []

    def default_bucket(ctx):
        chosen.append(ctx.request_id)
        return "notes"

    requests, refused, _ = run({"query": "flour"}, default_bucket=default_bucket)
    assert not refused and chosen
    assert requests[-1].url.path == f"/api/v1/buckets/{NOTES}/search"
