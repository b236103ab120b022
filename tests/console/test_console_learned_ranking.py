"""The console's page of learned rankings (memories.services.ranking_learning): what each bucket
learned, with its scores, ratings and time, and a reset that asks first and is audited."""

from __future__ import annotations

import pytest

from audit.models import AuditEvent
from memories.models import LearnedRanking
from tests.factories import make_operator

pytestmark = pytest.mark.django_db

URL = "/admin/memories/learnedranking/"


@pytest.fixture
def learned(bucket):
    return LearnedRanking.objects.create(
        tenant_id=bucket.tenant_id, bucket=bucket, adopted=True,
        settings={"recency_weight": 0.6, "weights": {"keyword": 1.4}}, ratings=48,
        train_queries=18, held_queries=6, train_before=0.61, train_after=0.93, held_before=0.58, held_after=0.9,
        candidates=33, searches=630,
    )  # fmt: skip


@pytest.fixture
def operator(client, tenant):
    client.force_login(make_operator("acme-operator", tenant))
    return client


def test_the_list_shows_settings_scores_ratings_and_when(operator, learned, bucket):
    page = operator.get(URL).content.decode()
    assert bucket.name in page
    assert "keyword 1.4, recency_weight 0.6" in page
    assert "0.580 → 0.900; training 0.610 → 0.930" in page
    assert "learned settings in use" in page and "48" in page and "18 / 6" in page


def test_reset_asks_first_then_forgets_and_audits(operator, learned, tenant):
    data = {"action": "reset", "_selected_action": [learned.pk], "index": 0}
    confirm = operator.post(URL, data)
    assert b"Yes, reset 1 bucket" in confirm.content
    assert LearnedRanking.objects.filter(pk=learned.pk).exists()  # nothing until confirmed
    operator.post(URL, {**data, "confirm": "yes"})
    row = LearnedRanking.objects.get(pk=learned.pk)
    assert row.reset_at is not None and not row.adopted and row.settings == {}
    assert "reset: defaults until new ratings" in operator.get(URL).content.decode()
    event = AuditEvent.objects.get(tenant=tenant, action="ranking.learned_reset")
    assert event.actor_label == "acme-operator"


def test_rows_cannot_be_edited_or_deleted_but_by_the_reset(operator, learned):
    assert operator.post(f"{URL}{learned.pk}/change/", {"adopted": ""}).status_code == 403
    response = operator.post(URL, {"action": "delete_selected", "_selected_action": [learned.pk], "post": "yes"})
    assert response.status_code in (200, 302)
    assert LearnedRanking.objects.filter(pk=learned.pk).exists()
