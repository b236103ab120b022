"""Engram's MCP tools over stdio: the official MCP SDK's client spawns ``engram-mcp`` (from the
project's virtualenv), which talks to a live Engram (gunicorn on the test database, started
and stopped here) with the token it was given.

A few cases that need no separate process (choosing the bucket) run the same server in
process, over the SDK's in-memory transport, still against the live API.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from engram_client import AsyncEngram
from engram_client.mcp import create_server
from mcp import Client, StdioServerParameters

from memories.services.buckets import bucket_create
from tenants import services as tenant_services
from tests.support import base_env, test_database_url, web_server

# The test database is set up for marked modules only.
pytestmark = [pytest.mark.slow, pytest.mark.django_db]

ENGRAM_MCP = Path(sys.executable).parent / "engram-mcp"
TOOLS = {
    "add_memories", "search_memories", "get_memory", "update_memory", "delete_memory", "list_buckets", "get_profile",
    "rate_memory",
    "get_blocks", "edit_block",
}  # fmt: skip


@pytest.fixture(scope="module")
def live(django_db_setup, django_db_blocker, tmp_path_factory):
    """gunicorn on the test database; a tenant with one bucket, a tenant with two, an outsider
    (all committed: the server has its own connection)."""
    log = tmp_path_factory.mktemp("mcp") / "server.log"
    env = base_env(DATABASE_URL=test_database_url(), ENGRAM_EMBEDDINGS="off", ENGRAM_TOKEN_RATE="100000/min")
    with django_db_blocker.unblock():
        tenant = tenant_services.tenant_create(name="MCP tests")
        main = bucket_create(tenant=tenant, name="main")
        several = tenant_services.tenant_create(name="MCP two buckets")
        work = bucket_create(tenant=several, name="work")
        home = bucket_create(tenant=several, name="home")
        outsider = tenant_services.tenant_create(name="MCP outsider")
        bucket_create(tenant=outsider, name="theirs")

        def token(owner, scopes):
            return tenant_services.token_issue(tenant=owner, name="mcp", scopes=scopes).secret

        tokens = SimpleNamespace(
            rw=token(tenant, ["read", "write"]),
            read_only=token(tenant, ["read"]),
            several=token(several, ["read", "write"]),
            outsider=token(outsider, ["read", "write"]),
        )
    try:
        with web_server(env, workers=1, log=log) as base:
            yield SimpleNamespace(base=base, main=str(main.pk), work=str(work.pk), home=str(home.pk), tokens=tokens)
    finally:
        with django_db_blocker.unblock():
            for owner in (tenant, several, outsider):
                owner.delete()


def stdio(live, token: str, *args: str) -> Client:
    """An MCP client session with ``engram-mcp`` spawned over stdio (the SDK gives it a minimal
    environment: PYTHONPATH is passed on, so it imports the client this test imports)."""
    env = {"ENGRAM_URL": live.base, "ENGRAM_TOKEN": token}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    params = StdioServerParameters(command=str(ENGRAM_MCP), args=list(args), env=env)
    return Client(params, read_timeout_seconds=60)


def answer(result) -> dict:
    """A tool's answer as the model reads it (its text), checked against its structured form."""
    assert not result.is_error, result.content[0].text
    data = json.loads(result.content[0].text)
    assert data == result.structured_content
    return data


def error(result) -> str:
    assert result.is_error, result.content
    return result.content[0].text


def test_an_agent_lists_the_tools_and_round_trips_a_memory(live):
    async def scenario():
        async with stdio(live, live.tokens.rw) as mcp:
            tools = {tool.name: tool for tool in (await mcp.list_tools()).tools}
            assert set(tools) == TOOLS
            assert all(tool.description for tool in tools.values())
            search_schema = tools["search_memories"].input_schema["properties"]
            assert {"query", "bucket", "buckets", "limit", "token_budget", "mode", "filters", "excerpt"} <= set(
                search_schema
            )
            assert all(p.get("description") for p in search_schema.values())
            assert tools["search_memories"].annotations.read_only_hint
            assert tools["get_profile"].annotations.read_only_hint
            assert {"name", "entity_id", "bucket", "as_of", "budget"} <= set(
                tools["get_profile"].input_schema["properties"]
            )
            assert tools["delete_memory"].annotations.destructive_hint

            # The token sees one bucket: it is the default, no configuration needed.
            buckets = answer(await mcp.call_tool("list_buckets", {}))
            assert buckets == {"buckets": [{"id": live.main, "name": "main"}], "default": live.main}

            added = answer(await mcp.call_tool("add_memories", {
                "contents": ["Erin's brother is called Tom.", "Tom lives in Oslo and works as a nurse."],
                "attributed_to": "user", "run_id": "chat-1", "tags": ["family"], "metadata": {"via": "mcp"},
            }))  # fmt: skip
            assert added["bucket"] == live.main
            brother, oslo = (m["id"] for m in added["memories"])
            single = answer(await mcp.call_tool("add_memories", {"contents": "Erin drinks oolong.", "bucket": "main"}))
            assert [m["deduplicated"] for m in single["memories"]] == [False]

            found = answer(await mcp.call_tool("search_memories", {"query": "Where does Tom live?", "limit": 5}))
            assert found["results"][0]["id"] == oslo
            assert set(found["results"][0]) == {"id", "content", "date", "score"}
            assert found["results"][0]["content"] == "Tom lives in Oslo and works as a nurse."
            filtered = {"hint_tags": ["family"], "attributed_to": "user"}
            found = answer(await mcp.call_tool("search_memories", {"query": "oolong", "filters": filtered}))
            assert found["results"] == []

            memory = answer(await mcp.call_tool("get_memory", {"id": brother}))
            assert (memory["content"], memory["attributed_to"], memory["tags"], memory["metadata"]) == (
                "Erin's brother is called Tom.", "user", ["family"], {"via": "mcp"},
            )  # fmt: skip
            assert memory["date"].endswith("Z") and memory["run_id"] == "chat-1"

            updated = answer(await mcp.call_tool("update_memory", {"id": oslo, "content": "Tom moved to Bergen."}))
            assert (updated["updated"], updated["content"]) == (True, "Tom moved to Bergen.")
            found = answer(await mcp.call_tool("search_memories", {"query": "Where does Tom live now? Bergen?"}))
            assert found["results"][0]["id"] == oslo
            rated = {"id": oslo, "signal": "useful", "query": "Where does Tom live now? Bergen?"}
            assert answer(await mcp.call_tool("rate_memory", rated)) == {"id": oslo, "rated": "useful"}
            assert error(await mcp.call_tool("rate_memory", {**rated, "signal": "great"}))

            assert answer(await mcp.call_tool("delete_memory", {"id": oslo})) == {"id": oslo, "deleted": True}
            gone = error(await mcp.call_tool("get_memory", {"id": oslo}))
            assert "not_found" in gone and "404" in gone and "Traceback" not in gone
            invalid = error(await mcp.call_tool("add_memories", {"contents": [" "]}))
            assert "may not be blank" in invalid and "invalid" in invalid

    asyncio.run(scenario())


def test_the_token_decides_what_the_tools_may_do(live):
    async def scenario():
        async with AsyncEngram(live.base, live.tokens.rw) as api:
            mine = await api.add_memory(live.main, "Fiona keeps bees.")
        async with stdio(live, live.tokens.read_only) as reader:
            refused = error(await reader.call_tool("add_memories", {"contents": "A reader may not write."}))
            assert "403" in refused and "permission" in refused.lower()
            refused = error(await reader.call_tool("delete_memory", {"id": mine.id}))
            assert "403" in refused
            refused = error(await reader.call_tool("rate_memory", {"id": mine.id, "signal": "useful", "query": "bees"}))
            assert "403" in refused
            found = answer(await reader.call_tool("search_memories", {"query": "Who keeps bees?"}))
            assert [r["id"] for r in found["results"]] == [mine.id]
        async with stdio(live, live.tokens.outsider) as outsider:
            for tool, arguments in [
                ("get_memory", {"id": mine.id}),
                ("update_memory", {"id": mine.id, "content": "Hijacked."}),
                ("delete_memory", {"id": mine.id}),
                ("rate_memory", {"id": mine.id, "signal": "irrelevant", "query": "bees"}),
                ("search_memories", {"query": "bees", "bucket": live.main}),
            ]:
                assert "not_found" in error(await outsider.call_tool(tool, arguments)), tool
        async with AsyncEngram(live.base, live.tokens.rw) as api:
            assert (await api.get_memory(mine.id)).content == "Fiona keeps bees."  # untouched

    asyncio.run(scenario())


def test_the_default_bucket_comes_from_the_flag_or_the_only_bucket(live):
    async def scenario():
        # Two buckets and nothing configured: the tool says so and names them.
        client = AsyncEngram(live.base, live.tokens.several)
        async with client, Client(create_server(lambda ctx: client)) as mcp:
            ambiguous = error(await mcp.call_tool("add_memories", {"contents": "Where does this go?"}))
            assert "Several buckets" in ambiguous and live.work in ambiguous and live.home in ambiguous
            assert answer(await mcp.call_tool("list_buckets", {}))["default"] is None
            by_name = answer(await mcp.call_tool("add_memories", {"contents": "Standup at nine.", "bucket": "work"}))
            assert by_name["bucket"] == live.work
            unknown = error(await mcp.call_tool("add_memories", {"contents": "x", "bucket": "nope"}))
            assert "No bucket named 'nope'" in unknown

        # engram-mcp --bucket (over ENGRAM_BUCKET) picks one.
        async with stdio(live, live.tokens.several, "--bucket", live.home) as mcp:
            added = answer(await mcp.call_tool("add_memories", {"contents": "The boiler is serviced in May."}))
            assert added["bucket"] == live.home
            assert answer(await mcp.call_tool("list_buckets", {}))["default"] == live.home
            found = answer(await mcp.call_tool("search_memories", {"query": "standup", "bucket": live.work}))
            assert [r["content"] for r in found["results"]] == ["Standup at nine."]

    asyncio.run(scenario())


def test_engram_mcp_refuses_to_start_without_a_token(live):
    env = {k: v for k, v in base_env().items() if k not in ("ENGRAM_TOKEN", "ENGRAM_URL")}
    run = subprocess.run([ENGRAM_MCP, "--url", live.base], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "ENGRAM_TOKEN" in run.stderr
    assert run.stdout == ""  # stdout is the protocol's


def test_a_tool_call_gets_the_client_of_its_own_context(live):
    """``client_for`` is called per tool call with that call's context: the HTTP endpoint gives
    each request a client with its own token."""
    seen = []

    async def scenario():
        # Clients made per call share one connection pool, which they do not own (nothing to close).
        async with httpx.AsyncClient() as pool:

            async def client_for(ctx):
                seen.append(ctx.request_id)
                return AsyncEngram(live.base, live.tokens.rw, http_client=pool)

            async with Client(create_server(client_for)) as mcp:
                answer(await mcp.call_tool("list_buckets", {}))
                answer(await mcp.call_tool("search_memories", {"query": str(uuid.uuid4())}))

    asyncio.run(scenario())
    assert len(seen) == 2 and seen[0] != seen[1]
