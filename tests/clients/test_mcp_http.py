"""MCP over streamable HTTP at /mcp: a real MCP client session (the SDK's) against a real server.

The tools act with the token of the /mcp request, through the REST API, so they are refused
exactly where the API refuses that token: a scope it lacks, a bucket it is not restricted to,
another tenant's ids.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import anyio
import httpx
import httpx2
import psycopg
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from psycopg.types.json import Jsonb

from memories.models import Memory
from memories.services.buckets import bucket_create
from tenants import services as tenant_services
from tests.support import ROOT, base_env, manage, test_database_url, web_server
from tests.support.snippets import code_blocks

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

TOOLS = {
    "add_memories", "search_memories", "get_memory", "update_memory", "delete_memory", "list_buckets", "get_profile",
    "rate_memory",
    "get_blocks", "edit_block",
}  # fmt: skip
# Both eras of the protocol the SDK serves: "auto" negotiates the current per-request one
# (2026-07-28), "legacy" the initialize handshake of the earlier revisions.
MODES = ["auto", "legacy"]


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory):
    """gunicorn on the test database, as ``./engram serve`` runs it, with a tenant of two buckets
    and its tokens, and an outsider tenant (all committed: the server has its own connection)."""
    log = tmp_path_factory.mktemp("mcp") / "server.log"
    with django_db_blocker.unblock():
        tenant = tenant_services.tenant_create(name="MCP tenant")
        main = bucket_create(tenant=tenant, name="main")
        notes = bucket_create(tenant=tenant, name="notes")
        outsider = tenant_services.tenant_create(name="MCP outsider")
        bucket_create(tenant=outsider, name="theirs")

        def token(owner, scopes, bucket=None, **kwargs) -> str:
            return tenant_services.token_issue(tenant=owner, name="t", scopes=scopes, bucket=bucket, **kwargs).secret

        tokens = SimpleNamespace(
            read_write=token(tenant, ["read", "write"]),
            read_only=token(tenant, ["read"]),
            notes_only=token(tenant, ["read", "write"], bucket=notes),
            outsider=token(outsider, ["admin"]),
            alfa_only=token(tenant, ["read", "write"], agent_ids=["alfa"]),
        )
    try:
        env = base_env(DATABASE_URL=test_database_url(), ENGRAM_EMBEDDINGS="off", ENGRAM_MAX_BODY_BYTES="100000")
        with web_server(env, log=log) as base:
            yield SimpleNamespace(base=base, url=base + "/mcp", main=str(main.pk), notes=str(notes.pk),
                                  tokens=tokens, log=log, tenant=tenant)  # fmt: skip
    finally:
        with django_db_blocker.unblock():
            tenant.delete()
            outsider.delete()


def session(server, token: str, body, *, mode: str = "auto", headers: dict | None = None, query: str = ""):
    """Run ``body(client)`` in an MCP client session with ``token`` (and more ``headers``, and a
    ``query`` string on the URL); returns what it returns."""

    async def main():
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}", **(headers or {})}, timeout=60) as http,
            Client(streamable_http_client(server.url + query, http_client=http), mode=mode) as client,
        ):
            return await body(client)

    return anyio.run(main)


async def call(client, tool: str, **arguments) -> tuple[bool, dict | str]:
    """(whether the tool refused, its answer: the JSON object it returned, or the error text)."""
    result = await client.call_tool(tool, arguments)
    text = result.content[0].text
    return result.is_error, (text if result.is_error else json.loads(text))


@pytest.mark.parametrize("mode", MODES)
def test_a_memory_round_trips_through_the_tools(server, mode):
    async def body(client):
        tools = {tool.name for tool in (await client.list_tools()).tools}
        steps = {"buckets": await call(client, "list_buckets")}
        steps["add"] = await call(client, "add_memories", bucket=server.main, contents="Ana's sister lives in Porto.",
                                  tags=["family"])  # fmt: skip
        memory_id = steps["add"][1]["memories"][0]["id"]
        steps["search"] = await call(client, "search_memories", bucket=server.main, query="Where is Ana's sister?")
        steps["get"] = await call(client, "get_memory", id=memory_id)
        steps["update"] = await call(client, "update_memory", id=memory_id, content="Ana's sister lives in Lisbon.")
        steps["delete"] = await call(client, "delete_memory", id=memory_id)
        steps["gone"] = await call(client, "get_memory", id=memory_id)
        return tools, memory_id, steps

    tools, memory_id, steps = session(server, server.tokens.read_write, body, mode=mode)
    assert tools == TOOLS
    assert not any(refused for refused, _ in list(steps.values())[:-1]), steps
    assert {b["name"] for b in steps["buckets"][1]["buckets"]} == {"main", "notes"}
    assert steps["add"][1]["bucket"] == server.main
    assert [hit["id"] for hit in steps["search"][1]["results"]] == [memory_id]
    assert steps["get"][1]["content"] == "Ana's sister lives in Porto."
    assert steps["get"][1]["tags"] == ["family"]
    assert steps["update"][1]["content"] == "Ana's sister lives in Lisbon."
    assert steps["delete"][1] == {"id": memory_id, "deleted": True}
    refused, message = steps["gone"]
    assert refused and "not found" in message.lower()
    assert not Memory.objects.filter(pk=memory_id).exists()


def test_search_memories_spans_the_buckets_it_is_given(server):
    async def body(client):
        main = await call(client, "add_memories", bucket=server.main, contents="The kiln in main fires at dawn.")
        notes = await call(client, "add_memories", bucket=server.notes, contents="The kiln in notes cools at dusk.")
        ids = {main[1]["memories"][0]["id"]: server.main, notes[1]["memories"][0]["id"]: server.notes}
        return ids, [
            await call(client, "search_memories", query="kiln", buckets=["main", server.notes]),
            await call(client, "search_memories", query="kiln", buckets=["*"]),
            await call(client, "search_memories", query="kiln", bucket="main"),
            await call(client, "search_memories", query="kiln", bucket="main", buckets=["notes"]),
            await call(client, "search_memories", query="kiln", buckets=["main", "nowhere"]),
        ]

    ids, (named, every, one, both, unknown) = session(server, server.tokens.read_write, body)
    for refused, found in (named, every):
        assert not refused, found
        assert {(hit["id"], hit["bucket"]) for hit in found["results"]} == set(ids.items())
        assert {b["name"] for b in found["buckets"]} == {"main", "notes"}
    assert [hit["id"] for hit in one[1]["results"]] == [i for i, b in ids.items() if b == server.main]
    assert "bucket" not in one[1]["results"][0] and "buckets" not in one[1]
    assert both[0] and "not both" in both[1]
    assert unknown[0] and "'nowhere'" in unknown[1]

    async def restricted(client):
        return (
            await call(client, "search_memories", query="kiln", buckets=["*"]),
            await call(client, "search_memories", query="kiln", buckets=[server.main, server.notes]),
        )

    # A token held to notes: every bucket it can read is notes; main is another's, not found.
    (refused, found), (main_refused, message) = session(server, server.tokens.notes_only, restricted)
    assert not refused and {hit["bucket"] for hit in found["results"]} == {server.notes}
    assert main_refused and "not found" in message.lower(), message

    async def outsider(client):
        return await call(client, "search_memories", query="kiln", buckets=[server.main])

    refused, message = session(server, server.tokens.outsider, outsider)
    assert refused and "not found" in message.lower(), message


def test_a_connection_names_its_default_bucket_in_a_header_or_the_url(server):
    """The read-write token sees two buckets: without a default, a call that names none is
    refused; X-Engram-Bucket (an id or a name) or ?bucket= picks one for the connection."""

    async def body(client):
        listed = await call(client, "list_buckets")
        added = await call(client, "add_memories", contents="The ferry leaves at noon.")
        found = await call(client, "search_memories", query="When does the ferry leave?")
        return listed, added, found

    by_header = session(server, server.tokens.read_write, body, headers={"X-Engram-Bucket": "notes"})
    by_query = session(server, server.tokens.read_write, body, query=f"?bucket={server.main}")
    both = session(server, server.tokens.read_write, body, headers={"X-Engram-Bucket": server.notes},
                   query="?bucket=main")  # fmt: skip
    for (_, listed), (refused, added), (_, found), bucket in (
        (*by_header, server.notes), (*by_query, server.main), (*both, server.notes)
    ):  # fmt: skip
        assert listed["default"] == bucket
        assert not refused and added["bucket"] == bucket
        assert [hit["id"] for hit in found["results"]] == [added["memories"][0]["id"]]

    async def unnamed(client):
        return await call(client, "add_memories", contents="Where would this go?")

    refused, message = session(server, server.tokens.read_write, unnamed)
    assert refused and "Several buckets" in message

    # A default outside the token's reach is not a way into it.
    refused, message = session(server, server.tokens.notes_only, unnamed, headers={"X-Engram-Bucket": server.main})
    assert refused and "not found" in message.lower(), message


def test_the_configuration_in_integrations_md_connects_with_its_default_bucket(server):
    """docs/INTEGRATIONS.md's MCP configuration, as an agent reads it: its URL (here the test
    server's), its headers with this test's token, and its bucket header naming notes."""
    (config,) = code_blocks(ROOT / "docs" / "INTEGRATIONS.md", "MCP", language="json")
    entry = json.loads(config)["mcpServers"]["engram"]
    assert entry["url"].endswith("/mcp")
    headers = dict(entry["headers"])
    assert headers.pop("Authorization").startswith("Bearer ")
    assert set(headers) == {"X-Engram-Bucket"}
    headers["X-Engram-Bucket"] = "notes"

    async def body(client):
        return await call(client, "list_buckets")

    refused, listed = session(server, server.tokens.read_write, body, headers=headers)
    assert not refused and listed["default"] == server.notes


def test_get_profile_says_what_is_known_about_someone_now_and_before(server):
    async def write(client):
        # Two calls: the move is written after the first address (its created_at is later).
        await call(client, "add_memories", bucket=server.main, contents="Zoltan Varga lives in Szeged.")
        return await call(
            client, "add_memories", bucket=server.main,
            contents=["Zoltan moved to Pecs.", "Zoltan likes chess.", "Zoltan Kiss works at Initech."],
        )  # fmt: skip

    refused, _ = session(server, server.tokens.read_write, write)
    assert not refused
    # The graph is the background worker's, which this test does not run: the operator's command.
    manage("rebuild_graph", "--bucket", server.main, env=base_env(DATABASE_URL=test_database_url()))

    async def ask(client):
        return (
            await call(client, "get_profile", bucket=server.main, name="Zoltan Varga", budget=60),
            await call(client, "get_profile", bucket=server.main, name="Zoltan"),
            await call(client, "get_profile", bucket=server.main),
        )

    (refused, profile), (ambiguous, message), (unnamed, hint) = session(server, server.tokens.read_only, ask)
    assert not refused, profile
    assert profile["entity"]["name"] == "Zoltan Varga"
    assert profile["digest"].splitlines()[:3] == ["Zoltan Varga (person).", "Now:", profile["digest"].splitlines()[2]]
    assert "lives in Pecs" in profile["digest"] and "lives in Szeged" in profile["digest"]
    pecs = next(f for f in profile["current"] if f["relation"] == "lives_in")
    assert pecs["value"] == "Pecs" and "to" not in pecs and len(pecs["memories"]) == 1
    assert [(f["relation"], f["value"]) for f in profile["history"]] == [("lives_in", "Szeged")]
    assert profile["history"][0]["to"] == pecs["from"]
    # Two Zoltans: the tool says which, with their ids.
    assert ambiguous and "Zoltan Varga" in message and "Zoltan Kiss" in message and "entity_id" in message, message
    assert unnamed and "name or entity_id" in hint


def set_settings_committed(tenant, value: dict) -> None:
    """The tenant's settings as the server sees them: written on a connection of its own (this
    test's transaction is never committed)."""
    with psycopg.connect(test_database_url(), autocommit=True) as conn:
        conn.execute("UPDATE tenants SET settings = %s WHERE id = %s", [Jsonb(value), tenant.pk])


def test_tool_calls_count_against_the_rate_quotas_as_their_api_requests(server):
    # One write a minute: the MCP envelope's own POSTs (initialize, each call) must not use it
    # up, or the session would be refused before its one write. (A second write is not tried:
    # the client waits out a Retry-After of up to 30 s and retries.)
    set_settings_committed(server.tenant, {"quotas": {"writes_per_minute": 1}})

    async def body(client):
        searches = [await call(client, "search_memories", bucket=server.main, query="lighthouse") for _ in range(3)]
        added = await call(client, "add_memories", bucket=server.main, contents="Quota note.")
        return searches, added

    try:
        searches, added = session(server, server.tokens.read_write, body)
    finally:
        set_settings_committed(server.tenant, {})
    assert not any(refused for refused, _ in searches), searches
    assert not added[0], added


def test_a_read_only_token_searches_but_cannot_write(server):
    async def body(client):
        return (
            await call(client, "add_memories", bucket=server.main, contents="Written with a read-only token."),
            await call(client, "search_memories", bucket=server.main, query="read-only"),
        )

    (refused, message), (search_refused, _) = session(server, server.tokens.read_only, body)
    assert refused and "write" in message, message  # the API's 403: the token lacks the 'write' scope
    assert not search_refused
    assert not Memory.objects.filter(content="Written with a read-only token.").exists()


def test_another_tenants_memory_answers_not_found(server):
    async def mine(client):
        return (await call(client, "add_memories", bucket=server.main, contents="Only my tenant reads this."))[1]

    memory_id = session(server, server.tokens.read_write, mine)["memories"][0]["id"]

    async def theirs(client):
        return [
            await call(client, "get_memory", id=memory_id),
            await call(client, "update_memory", id=memory_id, content="Overwritten by an outsider."),
            await call(client, "delete_memory", id=memory_id),
            await call(client, "add_memories", bucket=server.main, contents="Into another tenant's bucket."),
            await call(client, "list_buckets"),
        ]

    *refusals, (_, listed) = session(server, server.tokens.outsider, theirs)
    for refused, message in refusals:
        assert refused and "not found" in message.lower(), message
    assert [b["name"] for b in listed["buckets"]] == ["theirs"]
    assert Memory.objects.get(pk=memory_id).content == "Only my tenant reads this."
    assert not Memory.objects.filter(content="Into another tenant's bucket.").exists()


def test_a_token_restricted_to_a_bucket_uses_it_without_being_told(server):
    async def body(client):
        return (
            await call(client, "add_memories", contents="Filed in notes by default."),
            await call(client, "add_memories", bucket=server.main, contents="Not allowed in main."),
        )

    (refused, added), (main_refused, message) = session(server, server.tokens.notes_only, body)
    assert not refused and added["bucket"] == server.notes
    assert main_refused and "not found" in message.lower(), message
    assert str(Memory.objects.get(content="Filed in notes by default.").bucket_id) == server.notes


def test_a_token_held_to_an_agent_reaches_only_its_agents_memories_through_the_tools(server):
    async def beta(client):
        added = await call(client, "add_memories", bucket=server.main, contents="Beta's heron nests by the weir.",
                           agent_id="beta")  # fmt: skip
        return added[1]["memories"][0]["id"]

    beta_id = session(server, server.tokens.read_write, beta)

    async def alfa(client):
        return [
            await call(client, "add_memories", bucket=server.main, contents="Alfa's heron fishes at dawn."),
            await call(client, "search_memories", bucket=server.main, query="heron"),
            await call(client, "get_memory", id=beta_id),
            await call(client, "update_memory", id=beta_id, content="Overwritten by alfa."),
            await call(client, "delete_memory", id=beta_id),
            await call(client, "add_memories", bucket=server.main, contents="Alfa posing as beta.", agent_id="beta"),
        ]

    (refused, added), (search_refused, found), *refusals, (posing_refused, posing) = session(
        server, server.tokens.alfa_only, alfa
    )
    assert not refused and not search_refused
    alfa_id = added["memories"][0]["id"]
    assert Memory.objects.get(pk=alfa_id).agent_id == "alfa"  # the token's one agent, without being told
    assert [hit["id"] for hit in found["results"]] == [alfa_id]
    for refused, message in refusals:
        assert refused and "not found" in message.lower(), message
    assert posing_refused and "agent" in posing, posing
    assert Memory.objects.get(pk=beta_id).content == "Beta's heron nests by the weir."
    assert not Memory.objects.filter(content="Alfa posing as beta.").exists()


def test_the_endpoint_refuses_like_the_api(server):
    """A missing or bad token: the API's 401; a body over ENGRAM_MAX_BODY_BYTES: its 413."""
    initialize = {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }  # fmt: skip
    accept = {"Accept": "application/json, text/event-stream"}
    missing = httpx.post(server.url, json=initialize, headers=accept, timeout=30)
    wrong = httpx.post(server.url, json=initialize, headers={**accept, "Authorization": "Bearer egm_nope"}, timeout=30)
    assert (missing.status_code, missing.json()["code"]) == (401, "not_authenticated")
    assert (wrong.status_code, wrong.json()["code"]) == (401, "authentication_failed")
    assert missing.headers["WWW-Authenticate"] == 'Bearer realm="engram"'

    with pytest.raises(BaseExceptionGroup) as refused:  # the SDK's client gives up on the 401
        session(server, "egm_nope", lambda client: client.list_tools())
    assert refused.value.subgroup(MCPError) is not None

    valid = {**accept, "Authorization": f"Bearer {server.tokens.read_only}"}
    ok = httpx.post(server.url, json=initialize, headers=valid, timeout=30)
    assert ok.status_code == 200 and ok.headers["Content-Type"].startswith("application/json")
    assert ok.json()["result"]["serverInfo"]["name"] == "engram"

    too_large = {**initialize, "params": {**initialize["params"], "padding": "x" * 100_000}}
    oversized = httpx.post(server.url, json=too_large, headers=valid, timeout=30)
    assert (oversized.status_code, oversized.json()["code"]) == (413, "too_large")


def test_only_post_is_served(server):
    # Stateless: no stream to open with GET and no session to end with DELETE (405, which the
    # MCP transport specifies for a server that offers neither).
    headers = {"Authorization": f"Bearer {server.tokens.read_write}", "Accept": "text/event-stream"}
    for method in ("GET", "DELETE"):
        response = httpx.request(method, server.url, headers=headers, timeout=30)
        assert (response.status_code, response.json()["code"]) == (405, "method_not_allowed")
    # A POST that accepts event streams alone is answered (in JSON: the API's own error body).
    response = httpx.post(server.url, json={}, headers={"Accept": "text/event-stream"}, timeout=30)
    assert (response.status_code, response.json()["code"]) == (401, "not_authenticated")
