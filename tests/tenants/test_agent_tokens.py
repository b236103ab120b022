"""Tokens held to agents (docs/API.md, "Tokens held to agents"): issuing them, what they write,
shared memories with and without include_shared, and what the graph, sources and runs show them.
Every path to another agent's memory is refused in the generated matrix
(tests/system/test_isolation_matrix.py, endpoint × agent); these are the rules around it."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from engram_site.exceptions import DomainError
from graph.models import Mention
from memories.models import Memory
from sources.services.submit import MessageInput, source_submit_conversation
from tenants import services
from tenants.models import ApiToken
from tests.factories import make_client, make_graph_fact, write
from tests.support.db import assert_unchanged, db_snapshot

pytestmark = pytest.mark.django_db


def _held(tenant, *agents, include_shared=False, scopes=("read", "write")):
    return make_client(tenant, scopes=scopes, agent_ids=list(agents), include_shared=include_shared)


# --- issuing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"scopes": ["read", "admin"], "agent_ids": ["alfa"]},  # admin reaches every agent's memories
        {"scopes": ["read"], "include_shared": True},  # shared memories of which agents?
        {"scopes": ["read"], "agent_ids": ["alfa", "  "]},
        {"scopes": ["read"], "agent_ids": ["x" * 201]},
        {"scopes": ["read"], "agent_ids": [f"agent-{i}" for i in range(51)]},
    ],
)
def test_a_token_held_to_agents_is_refused_when_its_agents_make_no_sense(tenant, kwargs):
    with pytest.raises(DomainError) as refused:
        services.token_issue(tenant=tenant, name="t", **kwargs)
    assert refused.value.code == "invalid_agent_ids"
    assert not ApiToken.objects.exists()


def test_agent_ids_are_stripped_kept_once_and_audited(tenant):
    token = services.token_issue(tenant=tenant, name="t", scopes=["read"], agent_ids=[" alfa", "beta", "alfa"]).token
    assert token.agent_ids == ["alfa", "beta"] and not token.include_shared
    assert token.agents.agent_ids == ("alfa", "beta")
    assert services.token_issue(tenant=tenant, name="u", scopes=["read"]).token.agents is None


def test_create_tenant_issues_a_token_held_to_agents(db):
    out = io.StringIO()
    call_command("create_tenant", "Agents Corp", "--agents", "alfa,beta", "--include-shared", stdout=out)
    token = ApiToken.objects.get(tenant__name="Agents Corp")
    assert (token.agent_ids, token.include_shared) == (["alfa", "beta"], True)
    assert "Held to agents alfa,beta, and shared memories (read-only)." in out.getvalue()


def test_the_console_issues_a_token_held_to_agents(admin_client, tenant):
    form = {"tenant": tenant.pk, "name": "agent", "scopes": ["read", "write"], "agent_ids": "alfa, beta"}
    assert admin_client.post("/admin/tenants/apitoken/add/", {**form, "include_shared": "on"}).status_code == 302
    token = ApiToken.objects.get(name="agent")
    assert (token.agent_ids, token.include_shared) == (["alfa", "beta"], True)
    refused = admin_client.post("/admin/tenants/apitoken/add/", {**form, "name": "x", "scopes": ["admin"]})
    assert refused.status_code == 200 and "cannot have the admin scope" in refused.content.decode()
    assert not ApiToken.objects.filter(name="x").exists()


# --- writes ----------------------------------------------------------------------------------------


def test_a_write_without_agent_id_takes_the_tokens_one_agent(tenant, bucket):
    client = _held(tenant, "alfa")
    response = client.post(f"/api/v1/buckets/{bucket.pk}/memories", {"content": "Alfa files the log."}, format="json")
    assert response.status_code == 201
    assert Memory.objects.get(pk=response.json()["results"][0]["id"]).agent_id == "alfa"


def test_a_token_of_several_agents_must_say_which_and_writes_nothing_otherwise(tenant, bucket):
    client = _held(tenant, "alfa", "beta")
    url = f"/api/v1/buckets/{bucket.pk}/memories"
    before = db_snapshot()
    missing = client.post(url, {"memories": [{"content": "One.", "agent_id": "beta"}, {"content": "Two."}]},
                          format="json")  # fmt: skip
    foreign = client.post(url, {"content": "Three.", "agent_id": "gamma"}, format="json")
    assert_unchanged(before, "refused writes")
    assert (missing.status_code, missing.json()["code"]) == (400, "agent_required")
    assert "agent_id" in missing.json()["errors"]
    assert (foreign.status_code, foreign.json()["code"]) == (403, "agent_forbidden")
    assert client.post(url, {"content": "Four.", "agent_id": "beta"}, format="json").status_code == 201


def test_an_edit_cannot_hand_a_memory_to_another_agent_or_make_it_shared(tenant, bucket):
    memory_id = write(bucket, "Alfa's own note.", agent_id="alfa")[0]
    client = _held(tenant, "alfa", "beta")
    before = db_snapshot()
    for change in ({"agent_id": "gamma"}, {"agent_id": None}):
        response = client.patch(f"/api/v1/memories/{memory_id}", change, format="json")
        assert (response.status_code, response.json()["code"]) == (403, "agent_forbidden"), change
    assert_unchanged(before, "refused edits")
    moved = client.patch(f"/api/v1/memories/{memory_id}", {"agent_id": "beta"}, format="json")
    assert moved.status_code == 200 and moved.json()["agent_id"] == "beta"


def test_shared_memories_are_read_only_with_include_shared_and_missing_without(tenant, bucket):
    shared_id = write(bucket, "The tide tables hang by the door.")[0]
    write(bucket, "Alfa checks the tide tables.", agent_id="alfa")[0]
    with_shared, without = _held(tenant, "alfa", include_shared=True), _held(tenant, "alfa")
    url = f"/api/v1/memories/{shared_id}"

    assert with_shared.get(url).status_code == 200
    before = db_snapshot()
    for response in (with_shared.patch(url, {"content": "Changed."}, format="json"), with_shared.delete(url)):
        assert (response.status_code, response.json()["code"]) == (403, "agent_forbidden")
    assert_unchanged(before, "a shared memory changed by a token held to agents")
    found = with_shared.post(f"/api/v1/buckets/{bucket.pk}/search", {"query": "tide tables"}, format="json")
    assert {hit["agent_id"] for hit in found.json()["results"]} == {None, "alfa"}
    assert with_shared.get(f"/api/v1/buckets/{bucket.pk}").json()["memory_count"] == 2

    assert without.get(url).status_code == 404
    found = without.post(f"/api/v1/buckets/{bucket.pk}/search", {"query": "tide tables"}, format="json")
    assert [hit["agent_id"] for hit in found.json()["results"]] == ["alfa"]
    listed = without.get(f"/api/v1/buckets/{bucket.pk}/memories").json()["results"]
    assert [m["agent_id"] for m in listed] == ["alfa"]
    assert without.get(f"/api/v1/buckets/{bucket.pk}").json()["memory_count"] == 1


def test_a_token_held_to_agents_cannot_create_or_change_buckets(tenant, bucket):
    client = _held(tenant, "alfa")
    before = db_snapshot()
    created = client.post("/api/v1/buckets", {"name": "mine"}, format="json")
    renamed = client.patch(f"/api/v1/buckets/{bucket.pk}", {"name": "mine"}, format="json")
    assert_unchanged(before, "bucket writes by a token held to agents")
    assert [r.json()["code"] for r in (created, renamed)] == ["agent_forbidden", "agent_forbidden"]


def test_a_runs_context_is_drawn_only_from_memories_the_writer_may_read(tenant, bucket):
    write(bucket, "Beta hid the spare key under the mat.", agent_id="beta", run_id="r1")[0]
    client = _held(tenant, "alfa")
    url = f"/api/v1/buckets/{bucket.pk}/memories"
    first = client.post(url, {"content": "Alfa waters the ferns.", "run_id": "r1"}, format="json")
    second = client.post(url, {"content": "Alfa feeds the cat.", "run_id": "r1"}, format="json")
    first, second = (Memory.objects.get(pk=r.json()["results"][0]["id"]) for r in (first, second))
    assert first.context_text is None
    assert second.context_text == "Alfa waters the ferns."
    assert second.sequence_index == first.sequence_index + 1 == 2  # positions still count beta's memory


# --- the graph, sources, imports -------------------------------------------------------------------


def test_an_entity_counts_only_the_mentions_the_token_may_read(tenant, bucket):
    alfa_id, beta_id = (
        write(bucket, "Marta sails with alfa.", agent_id="alfa")[0],
        write(bucket, "Marta sails with beta.", agent_id="beta")[0],
    )
    entity, _edge = make_graph_fact(bucket, alfa_id, "shared")
    Mention.objects.create(tenant_id=tenant.pk, bucket_id=bucket.pk, memory_id=beta_id, entity=entity)
    entity.mention_count = 2
    entity.save(update_fields=["mention_count"])
    make_graph_fact(bucket, beta_id, "beta")  # an entity and an edge of beta's alone
    listed = _held(tenant, "alfa").get(f"/api/v1/buckets/{bucket.pk}/entities").json()["results"]
    assert [(e["name"], e["mention_count"]) for e in listed] == [("shared Marta", 1)]
    assert make_client(tenant).get(f"/api/v1/entities/{entity.pk}").json()["mention_count"] == 2


def test_a_source_with_another_agents_message_is_missing_to_the_token(tenant, bucket):
    mixed = source_submit_conversation(
        bucket=bucket, agent_id="alfa",
        messages=[MessageInput(role="user", content="Hello."), MessageInput(role="assistant", content="Hi.",
                                                                             agent_id="beta")],
    ).source  # fmt: skip
    client = _held(tenant, "alfa")
    assert client.get(f"/api/v1/sources/{mixed.pk}").status_code == 404
    assert client.get(f"/api/v1/buckets/{bucket.pk}/sources").json()["results"] == []
    assert make_client(tenant).get(f"/api/v1/sources/{mixed.pk}").status_code == 200


def test_an_import_line_of_another_agent_is_rejected_and_nothing_is_imported(tenant, bucket):
    client = _held(tenant, "alfa")
    body = b'{"content": "Mine."}\n{"content": "Theirs.", "agent_id": "beta"}\n'
    url = f"/api/v1/buckets/{bucket.pk}/import"
    before = db_snapshot()
    refused = client.post(url, data=body, content_type="application/x-ndjson")
    assert_unchanged(before, "a refused import")
    assert (refused.status_code, refused.json()["code"]) == (400, "invalid_lines")
    assert refused.json()["rejected"][0]["line"] == 2
    skipped = client.post(url + "?skip_invalid=true", data=body, content_type="application/x-ndjson")
    assert skipped.json()["imported"] == 1
    assert list(Memory.objects.values_list("content", "agent_id")) == [("Mine.", "alfa")]


def test_the_graph_signal_walks_only_the_edges_of_memories_the_token_may_read(tenant, bucket):
    """Beta's memory links Marta Quill to Olek Brand; alfa's memory names Olek alone. A graph
    search for Marta reaches alfa's memory only through beta's edge: not for alfa's token."""
    from django.utils import timezone

    from graph.models import Edge, Entity

    beta_id = write(bucket, "Marta Quill knows Olek Brand.", agent_id="beta")[0]
    alfa_id = write(bucket, "Olek Brand repairs clocks.", agent_id="alfa")[0]
    marta, olek = (
        Entity.objects.create(tenant_id=tenant.pk, bucket_id=bucket.pk, name=name, normalized_name=name.lower(),
                              type="PERSON", mention_count=1)
        for name in ("Marta Quill", "Olek Brand")
    )  # fmt: skip
    Mention.objects.create(tenant_id=tenant.pk, bucket_id=bucket.pk, memory_id=beta_id, entity=marta)
    Mention.objects.create(tenant_id=tenant.pk, bucket_id=bucket.pk, memory_id=alfa_id, entity=olek)
    Edge.objects.create(
        tenant_id=tenant.pk, bucket_id=bucket.pk, subject=marta, predicate="knows", object_entity=olek,
        valid_from=timezone.now(), source_memory_id=beta_id,
    )  # fmt: skip
    query = {"query": "Who does Marta Quill know?", "mode": "graph", "explain": True}
    everyone = make_client(tenant).post(f"/api/v1/buckets/{bucket.pk}/search", query, format="json").json()
    assert str(alfa_id) in [hit["id"] for hit in everyone["results"]]  # reached through beta's edge
    held = _held(tenant, "alfa").post(f"/api/v1/buckets/{bucket.pk}/search", query, format="json").json()
    assert held["results"] == []


def test_a_memorys_source_is_named_only_when_the_token_may_read_it(tenant, bucket):
    from sources.models import SourceChunk, SourceChunkMemory
    from sources.services.submit import source_submit_document

    memory_id = write(bucket, "Alfa likes green tea.", agent_id="alfa")[0]
    theirs = source_submit_document(bucket=bucket, title="Beta's notes", text="Alfa likes green tea.", agent_id="beta")
    chunk = SourceChunk.objects.get(source_id=theirs.source.pk)
    SourceChunkMemory.objects.create(source_id=theirs.source.pk, chunk=chunk, memory_id=memory_id, created=False)
    assert _held(tenant, "alfa").get(f"/api/v1/memories/{memory_id}").json()["source"] is None
    assert make_client(tenant).get(f"/api/v1/memories/{memory_id}").json()["source"]["title"] == "Beta's notes"


def test_a_source_submitted_by_a_token_held_to_agents_draws_its_context_from_what_it_may_read(tenant, bucket):
    from sources.services.process import source_process

    write(bucket, "Beta hid the spare key under the mat.", agent_id="beta", run_id="r1")[0]
    client = _held(tenant, "alfa")
    body = {"messages": [{"role": "user", "content": "I water the ferns every Sunday."}], "run_id": "r1"}
    submitted = client.post(f"/api/v1/buckets/{bucket.pk}/conversations", body, format="json")
    assert submitted.status_code == 202
    source_process(source_id=submitted.json()["id"])
    distilled = Memory.objects.exclude(agent_id="beta").get()
    assert distilled.agent_id == "alfa" and distilled.run_id == "r1"
    assert "spare key" not in (distilled.context_text or "")
