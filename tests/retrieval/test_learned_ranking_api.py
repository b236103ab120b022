"""GET and DELETE /api/v1/buckets/{id}/learned-ranking: what a bucket's ranking learned from its
feedback (status, settings, when, ratings, held-back score against the defaults'), and its reset
(write scope, audited, the defaults until the ratings change), held to the token's tenant, bucket
and agents (also tests/system/test_isolation_matrix.py)."""

from __future__ import annotations

import pytest
from django.db.models import Max

from audit.models import AuditEvent
from engram_site.scoping import scopes_disabled
from memories.models import LearnedRanking, SearchFeedback
from memories.retrieval.learned import learned_for
from memories.services import ranking_learning
from memories.services.buckets import bucket_create
from tests.factories import make_client, write

pytestmark = pytest.mark.django_db


def _url(bucket) -> str:
    return f"/api/v1/buckets/{bucket.pk}/learned-ranking"


def _rate(api, memory_id, signal="useful", query="Where does Tom live?"):
    response = api.post(f"/api/v1/memories/{memory_id}/feedback", {"signal": signal, "query": query}, format="json")
    assert response.status_code == 201, response.content


@pytest.fixture
def rated(api, bucket) -> list:
    ids = write(bucket, "Tom lives in Paris.", "Tom rents a flat in Lisbon.", api=api, sequence=False)
    _rate(api, ids[1])
    _rate(api, ids[0], "irrelevant")
    return ids


@pytest.fixture
def learned(bucket, rated) -> LearnedRanking:
    """A row as a learning run leaves it (the run itself: tests/retrieval/test_learned_ranking.py)."""
    newest = SearchFeedback.objects.for_bucket(bucket).aggregate(newest=Max("id"))["newest"]
    return LearnedRanking.objects.create(
        tenant_id=bucket.tenant_id, bucket=bucket, adopted=True,
        settings={"recency_weight": 0.6, "weights": {"keyword": 1.4}}, ratings=2, newest_rating_id=newest,
        train_queries=30, held_queries=10, train_before=0.61, train_after=0.9312, held_before=0.58, held_after=0.9,
        candidates=33, searches=1010,
    )  # fmt: skip


def test_a_bucket_never_learned_answers_status_none_with_its_ratings(api, bucket, rated):
    response = api.get(_url(bucket))
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "none" and body["settings"] == {} and body["learned_at"] is None
    assert body["ratings"] is None and body["ratings_now"] == 2 and body["min_ratings"] == 30
    assert body["held_back_score"] is None and body["questions"] is None


def test_a_learned_bucket_answers_settings_when_ratings_and_held_back_score(api, bucket, learned):
    body = api.get(_url(bucket)).json()
    assert body["status"] == "in_use"
    assert body["settings"] == {"recency_weight": 0.6, "weights": {"keyword": 1.4}}
    assert body["learned_at"] and body["reset_at"] is None
    assert body["ratings"] == 2 and body["questions"] == {"training": 30, "held_back": 10}
    assert body["held_back_score"] == {"defaults": 0.58, "learned": 0.9}
    assert body["training_score"] == {"defaults": 0.61, "learned": 0.9312}
    assert body["searches"] == 1010


def test_settings_that_did_not_beat_the_defaults_are_not_shown_as_in_use(api, bucket, learned):
    LearnedRanking.objects.filter(pk=learned.pk).update(adopted=False, settings={})
    body = api.get(_url(bucket)).json()
    assert body["status"] == "defaults_kept" and body["settings"] == {}
    assert body["held_back_score"] == {"defaults": 0.58, "learned": 0.9}


def test_reset_uses_the_defaults_at_once_is_audited_and_holds_until_the_ratings_change(api, bucket, rated, learned):
    assert learned_for(bucket) is not None
    response = api.delete(_url(bucket))
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "reset" and body["settings"] == {} and body["reset_at"]
    assert body["learned_at"] is None and body["held_back_score"] is None and body["ratings"] == 2
    assert learned_for(bucket) is None  # this process's searches use the defaults at once
    [event] = AuditEvent.objects.filter(tenant=bucket.tenant, action="ranking.learned_reset")
    assert event.actor_id == str(api.token.pk) and event.details["settings"] == learned.settings
    # The nightly run leaves it on the defaults until a rating comes or goes ...
    with scopes_disabled():
        assert ranking_learning.buckets_to_learn(min_ratings=1, limit=10) == []
    _rate(api, rated[1], query="Where is Tom now?")
    with scopes_disabled():
        assert ranking_learning.buckets_to_learn(min_ratings=1, limit=10) == [bucket]
    # ... and a second reset changes nothing and audits nothing.
    again = api.delete(_url(bucket))
    assert again.status_code == 200 and again.json()["reset_at"] == body["reset_at"]
    assert AuditEvent.objects.filter(tenant=bucket.tenant, action="ranking.learned_reset").count() == 1


def test_resetting_a_bucket_that_learned_nothing_changes_nothing(api, bucket):
    response = api.delete(_url(bucket))
    assert response.status_code == 200 and response.json()["status"] == "none"
    assert not LearnedRanking.objects.exists()
    assert not AuditEvent.objects.filter(action="ranking.learned_reset").exists()


def test_a_read_token_cannot_reset(tenant, bucket, learned):
    reader = make_client(tenant, scopes=("read",))
    assert reader.get(_url(bucket)).status_code == 200
    assert reader.delete(_url(bucket)).status_code == 403
    assert LearnedRanking.objects.get(pk=learned.pk).adopted


def test_a_token_held_to_agents_can_neither_read_nor_reset_it(tenant, bucket, learned):
    agent = make_client(tenant, scopes=("read", "write"), agent_ids=["alfa"], include_shared=True)
    for response in (agent.get(_url(bucket)), agent.delete(_url(bucket))):
        assert response.status_code == 403 and response.json()["code"] == "agent_forbidden"
    assert LearnedRanking.objects.get(pk=learned.pk).adopted


def test_another_tenant_and_another_bucket_get_404_and_change_nothing(tenant, bucket, learned, outsider_api):
    elsewhere = make_client(tenant, scopes=("read", "write"), bucket=bucket_create(tenant=tenant, name="elsewhere"))
    for client in (outsider_api, elsewhere):
        assert client.get(_url(bucket)).status_code == 404
        assert client.delete(_url(bucket)).status_code == 404
    assert LearnedRanking.objects.get(pk=learned.pk).adopted
    assert not AuditEvent.objects.filter(action="ranking.learned_reset").exists()
