"""Feedback on a memory (POST /api/v1/memories/{id}/feedback): stored per bucket, held to the
token like a write, in the memory's history, gone with the memory and with an erased agent."""

from __future__ import annotations

import uuid

import pytest

from audit.services import Actor
from memories.models import Memory, MemoryVersion, SearchFeedback
from memories.services import memory_delete
from memories.services.buckets import bucket_create
from memories.services.erasure import memories_erase
from memories.services.merge import memories_absorb, memories_move_bucket
from tests.factories import make_client, write
from tests.support.db import assert_unchanged, db_snapshot

pytestmark = pytest.mark.django_db

OPERATOR = Actor.system("test operator")


def rate(api, memory_id, signal="useful", query="what does Maya eat?", **body):
    return api.post(f"/api/v1/memories/{memory_id}/feedback", {"signal": signal, "query": query, **body}, format="json")


def test_a_rating_is_stored_in_the_memorys_bucket_with_its_query_vector(api, bucket):
    [memory_id] = write(bucket, "Maya is vegetarian", api=api)
    response = rate(api, memory_id, run_id="run-1")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["signal"] == "useful" and body["query"] == "what does Maya eat?" and body["embedded"] is True
    assert body["bucket_id"] == str(bucket.pk) and body["run_id"] == "run-1" and body["agent_id"] is None
    row = SearchFeedback.objects.for_bucket(bucket).get(pk=body["id"])
    assert str(row.memory_id) == memory_id and row.embedding_model == bucket.embedding_model
    assert row.query_embedding is not None and len(row.query_embedding) == 384


def test_a_rating_is_in_the_memorys_history(api, bucket):
    [memory_id] = write(bucket, "Maya is vegetarian", api=api)
    rate(api, memory_id, signal="irrelevant", query="who is Maya's dentist?", run_id="r9")
    [version] = api.get(f"/api/v1/memories/{memory_id}/history").json()["versions"]
    assert version["kind"] == "rated" and version["changed"] == []
    assert version["details"]["signal"] == "irrelevant" and version["details"]["query"] == "who is Maya's dentist?"
    assert version["details"]["run_id"] == "r9" and version["actor"]["kind"] == "token"


@pytest.mark.parametrize(
    "body",
    [
        {"signal": "great", "query": "q"},
        {"signal": "useful"},
        {"signal": "useful", "query": ""},
        {"signal": "useful", "query": 12},
        {"signal": "useful", "query": "x" * 4001},
        {"signal": "useful", "query": "q", "agent_id": ["a"]},
        {"signal": "useful", "query": "q", "colour": "red"},
        {"query": "q"},
    ],
)
def test_bad_input_is_a_400_and_changes_nothing(api, bucket, body):
    [memory_id] = write(bucket, "Maya is vegetarian", api=api)
    before = db_snapshot()
    response = api.post(f"/api/v1/memories/{memory_id}/feedback", body, format="json")
    assert response.status_code == 400, response.content
    assert_unchanged(before, "the refused rating")


def test_an_unknown_or_malformed_memory_is_a_404(api, bucket):
    assert rate(api, uuid.uuid4()).status_code == 404
    assert rate(api, "not-an-id").status_code == 404


def test_an_outsider_cannot_rate_another_tenants_memory(api, bucket, outsider_api):
    [memory_id] = write(bucket, "Maya is vegetarian", api=api)
    before = db_snapshot()
    assert rate(outsider_api, memory_id).status_code == 404
    assert_unchanged(before, "the refused rating")


def test_a_read_only_token_cannot_rate(tenant, bucket, api):
    [memory_id] = write(bucket, "Maya is vegetarian", api=api)
    reader = make_client(tenant, scopes=("read",))
    assert rate(reader, memory_id).status_code == 403
    assert not SearchFeedback.objects.for_bucket(bucket).exists()


def test_a_token_held_to_another_bucket_gets_a_404(tenant, bucket, api):
    [memory_id] = write(bucket, "Maya is vegetarian", api=api)
    other = bucket_create(tenant=tenant, name="elsewhere")
    held = make_client(tenant, bucket=other)
    assert rate(held, memory_id).status_code == 404
    assert not SearchFeedback.objects.for_bucket(bucket).exists()


def test_a_token_held_to_agents_rates_as_its_agent_and_not_as_another(tenant, bucket, api):
    [mine, theirs] = write(bucket, {"content": "alfa note", "agent_id": "alfa"},
                           {"content": "beta note", "agent_id": "beta"}, api=api)  # fmt: skip
    alfa = make_client(tenant, agent_ids=["alfa"])
    response = rate(alfa, mine)
    assert response.status_code == 201 and response.json()["agent_id"] == "alfa"
    assert rate(alfa, mine, agent_id="beta").status_code == 403
    # Another agent's memory is not there for it.
    assert rate(alfa, theirs).status_code == 404
    assert SearchFeedback.objects.for_bucket(bucket).count() == 1


def test_ratings_go_with_a_deleted_memory(api, bucket):
    [memory_id] = write(bucket, "Maya is vegetarian", api=api)
    rate(api, memory_id)
    memory_delete(memory=Memory.objects.get(pk=memory_id), actor=OPERATOR)
    assert not SearchFeedback.objects.for_bucket(bucket).exists()


def test_an_erased_agents_ratings_and_their_history_go(tenant, bucket, api):
    [kept] = write(bucket, {"content": "The office is on Elm Street", "agent_id": "keep"}, api=api)
    [gone] = write(bucket, {"content": "zed likes tea", "agent_id": "zed"}, api=api)
    rate(api, kept, query="where is the office?", agent_id="zed")  # zed's rating of another's memory
    rate(api, kept, query="which street is the office on?", agent_id="keep")
    rate(api, gone, agent_id="keep")
    report = memories_erase(tenant=tenant, fields={"agent_id": "zed"}, actor=OPERATOR)
    assert report.feedback == 2  # zed's rating, and the rating of zed's memory
    left = SearchFeedback.objects.for_bucket(bucket)
    assert [(str(f.memory_id), f.agent_id) for f in left] == [(kept, "keep")]
    queries = [v.details["query"] for v in MemoryVersion.objects.filter(tenant_id=tenant.pk, kind="rated")]
    assert queries == ["which street is the office on?"]


def test_a_merge_moves_the_absorbed_memorys_ratings_to_its_survivor(api, bucket):
    survivor, absorbed = write(bucket, "Maya is vegetarian", "Maya eats no meat", api=api, sequence=False)
    rate(api, absorbed)
    memories_absorb(mapping={absorbed: survivor}, actor=OPERATOR)
    [row] = SearchFeedback.objects.for_bucket(bucket)
    assert str(row.memory_id) == survivor


def test_a_bucket_merge_moves_the_ratings_to_the_target(tenant, bucket, api):
    target = bucket_create(tenant=tenant, name="target")
    [memory_id] = write(bucket, "Maya is vegetarian", api=api)
    rate(api, memory_id)
    memories_move_bucket(source=bucket, target=target)
    assert SearchFeedback.objects.for_bucket(target).count() == 1
    assert not SearchFeedback.objects.for_bucket(bucket).exists()


def test_a_rating_stored_while_the_model_was_down_gets_its_vector_from_embed_missing(api, bucket, monkeypatch):
    """A model that is down does not refuse a rating (it is kept without a vector), and the
    embed_missing job gives it its vector once the model is back: no rating is lost for good."""
    from django_scopes import scopes_disabled

    from engram_site.jobs import runner
    from engram_site.providers import embedding
    from maintenance.services import enrichment

    [memory_id] = write(bucket, "Maya is vegetarian", api=api)
    real = embedding.embed_query

    def down(*args, **kwargs):
        raise embedding.EmbeddingUnavailable("model down for the test")

    monkeypatch.setattr(embedding, "embed_query", down)
    response = rate(api, memory_id, query="what does Maya never eat?")
    assert response.status_code == 201 and response.json()["embedded"] is False
    row = SearchFeedback.objects.for_bucket(bucket).get(pk=response.json()["id"])
    assert row.query_embedding is None and row.embedding_model is None
    with scopes_disabled():
        still_down = runner.run_job("embed_missing", enrichment.missing_fill, kind="embeddings")
    assert still_down.counts.get("ratings_embedded", 0) == 0  # kept for the next run, not dropped

    monkeypatch.setattr(embedding, "embed_query", real)
    with scopes_disabled():
        outcome = runner.run_job("embed_missing", enrichment.missing_fill, kind="embeddings")
    assert outcome.counts["ratings_embedded"] == 1
    row.refresh_from_db()
    assert row.embedding_model == bucket.embedding_model
    assert list(row.query_embedding) == pytest.approx(
        real("what does Maya never eat?", model=bucket.embedding_model).tolist(), abs=1e-6
    )
