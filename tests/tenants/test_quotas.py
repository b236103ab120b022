"""Per-tenant quotas (tenants/quotas.py, memories/quotas.py): over a rate the API answers 429
with Retry-After, over a size 403 with a quota_* code; nothing is written, the refusal is
counted in the tenant's usage, and another tenant is not affected."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
from django.core.cache import cache

from engram_site import throttle
from memories.models import DeletedMemory, Memory
from sources.models import Source
from tenants import usage
from tenants.models import TenantUsage
from tenants.quotas import quotas_clean
from tests.factories import make_client

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_pending_usage():
    usage.discard()
    yield
    usage.discard()


@pytest.fixture
def mid_minute(monkeypatch):
    """The rate counters' clock held in the middle of a minute. Their sliding window weighs the
    previous minute's count by how much of it is still covered, so one request just before a
    minute's end weighs less than one just after it: two requests a moment apart that straddle
    the end are both let through under a quota of 1 (which made these tests fail now and then)."""
    now = (time.time() // 60) * 60 + 30
    monkeypatch.setattr(throttle, "time", SimpleNamespace(time=lambda: now))


def set_quotas(tenant, **limits) -> None:
    tenant.settings = {**(tenant.settings or {}), "quotas": limits}
    tenant.save(update_fields=["settings"])


def memories_url(bucket) -> str:
    return f"/api/v1/buckets/{bucket.pk}/memories"


def batch(*contents) -> dict:
    return {"memories": [{"content": c} for c in contents]}


def refused(tenant) -> dict:
    usage.flush()
    row = TenantUsage.objects.filter(tenant=tenant).first()
    return {kind: getattr(row, f"refused_{kind}") for kind in usage.REFUSALS} if row else {}


def test_no_quotas_means_no_limit(api, bucket):
    for i in range(3):
        assert api.post(memories_url(bucket), batch(f"fact {i} a", f"fact {i} b"), format="json").status_code == 201
    assert api.get(memories_url(bucket)).status_code == 200
    assert Memory.objects.filter(bucket=bucket).count() == 6


def test_a_batch_over_max_batch_is_refused_with_403_and_writes_nothing(api, tenant, bucket):
    set_quotas(tenant, max_batch=2)
    response = api.post(memories_url(bucket), batch("one", "two", "three"), format="json")
    assert response.status_code == 403
    body = response.json()
    assert body["code"] == "quota_batch" and "max_batch" in body["detail"] and "at most 2" in body["detail"]
    assert not Memory.objects.filter(bucket=bucket).exists()
    assert refused(tenant)["batch"] == 1
    assert api.post(memories_url(bucket), batch("one", "two"), format="json").status_code == 201


def test_writes_past_max_memories_are_refused_with_403_and_write_nothing(
    api, tenant, bucket, django_capture_on_commit_callbacks
):
    set_quotas(tenant, max_memories=3)

    def post(body):
        # Committed writes are added to the cached count after commit (the test's transaction
        # never commits: run the callbacks as a commit would).
        with django_capture_on_commit_callbacks(execute=True):
            return api.post(memories_url(bucket), body, format="json")

    assert post(batch("alpha fact", "beta fact")).status_code == 201
    response = post(batch("gamma fact", "delta fact"))
    assert response.status_code == 403 and response.json()["code"] == "quota_memories"
    assert "max_memories" in response.json()["detail"]
    assert Memory.objects.filter(bucket=bucket).count() == 2
    assert post({"content": "gamma fact"}).status_code == 201
    # Within the cached count's lifetime: this process's own write was added to it.
    assert post({"content": "delta fact"}).status_code == 403
    assert Memory.objects.filter(bucket=bucket).count() == 3
    assert refused(tenant)["memories"] == 2


def test_restoring_past_max_memories_is_refused_with_403_and_restores_nothing(
    api, tenant, bucket, django_capture_on_commit_callbacks
):
    """Issue 46, item 3: at the limit, delete some, write as many new ones, restore the deleted:
    the tenant held more live memories than its max_memories, and could repeat it without end."""
    set_quotas(tenant, max_memories=3)

    def call(method, path, body=None):
        with django_capture_on_commit_callbacks(execute=True):  # the cached count follows commits
            return getattr(api, method)(path, body, format="json")

    ids = [r["id"] for r in call("post", memories_url(bucket), batch("one fact", "two fact", "three fact")).json()[
        "results"]]  # fmt: skip
    assert call("delete", f"/api/v1/memories/{ids[0]}").status_code == 204
    cache.clear()  # the cached count expires (deletes are seen then)
    assert call("post", memories_url(bucket), {"content": "four fact"}).status_code == 201  # at the limit again
    response = call("post", f"/api/v1/memories/{ids[0]}/restore")
    assert response.status_code == 403 and response.json()["code"] == "quota_memories"
    assert Memory.objects.filter(bucket=bucket).count() == 3
    assert DeletedMemory.objects.filter(pk=ids[0]).exists()
    assert refused(tenant)["memories"] == 1

    # Under the limit a restore is allowed, and counts: the next write is refused at once.
    assert call("delete", f"/api/v1/memories/{ids[1]}").status_code == 204
    cache.clear()
    assert call("post", f"/api/v1/memories/{ids[0]}/restore").status_code == 200
    assert call("post", memories_url(bucket), {"content": "five fact"}).status_code == 403
    assert Memory.objects.filter(bucket=bucket).count() == 3


def test_a_document_over_max_document_bytes_is_refused_with_403_and_stores_no_source(api, tenant, bucket):
    set_quotas(tenant, max_document_bytes=100)
    text = "é" * 60  # 60 characters, 120 bytes
    response = api.post(f"/api/v1/buckets/{bucket.pk}/documents", {"title": "t", "text": text}, format="json")
    assert response.status_code == 403 and response.json()["code"] == "quota_document_bytes"
    assert "max_document_bytes" in response.json()["detail"]
    assert not Source.objects.filter(bucket=bucket).exists()
    assert refused(tenant)["document_bytes"] == 1


def test_a_conversation_over_max_document_bytes_is_refused_with_403_and_stores_no_source(api, tenant, bucket):
    """Issue 46, item 4: a text refused as a document went through as a conversation."""
    set_quotas(tenant, max_document_bytes=100)
    url = f"/api/v1/buckets/{bucket.pk}/conversations"
    # 2 × 30 characters of two bytes each: 120 bytes in all, no message over the limit alone.
    messages = [{"role": "user", "content": "é" * 30}, {"role": "assistant", "content": "ü" * 30}]
    response = api.post(url, {"messages": messages}, format="json")
    assert response.status_code == 403 and response.json()["code"] == "quota_document_bytes"
    assert "max_document_bytes" in response.json()["detail"] and "needs 120" in response.json()["detail"]
    assert not Source.objects.filter(bucket=bucket).exists()
    assert refused(tenant)["document_bytes"] == 1
    assert api.post(url, {"messages": messages[:1]}, format="json").status_code == 202


def test_conversations_and_imports_are_refused_while_the_tenant_is_at_max_memories(api, tenant, bucket):
    api.post(memories_url(bucket), batch("first fact", "second fact"), format="json")
    set_quotas(tenant, max_memories=2)
    conversation = {"messages": [{"role": "user", "content": "I moved to Porto."}]}
    response = api.post(f"/api/v1/buckets/{bucket.pk}/conversations", conversation, format="json")
    assert response.status_code == 403 and response.json()["code"] == "quota_memories"
    line = json.dumps({"content": "imported fact"}) + "\n"
    response = api.generic(
        "POST", f"/api/v1/buckets/{bucket.pk}/import", line.encode(), content_type="application/x-ndjson"
    )
    assert response.status_code == 403 and response.json()["code"] == "quota_memories"
    assert not Source.objects.filter(bucket=bucket).exists()
    assert Memory.objects.filter(bucket=bucket).count() == 2
    assert refused(tenant)["memories"] == 2


def test_reads_over_reads_per_minute_answer_429_with_retry_after(api, tenant, bucket, mid_minute):
    set_quotas(tenant, reads_per_minute=2)
    assert api.get(memories_url(bucket)).status_code == 200
    assert api.post(f"/api/v1/buckets/{bucket.pk}/search", {"query": "x"}, format="json").status_code == 200
    response = api.get(memories_url(bucket))
    assert response.status_code == 429
    assert response.json()["code"] == "quota_reads_per_minute" and "reads_per_minute" in response.json()["detail"]
    assert int(response["Retry-After"]) >= 1
    # A search is a read: refused too. Writes have their own budget.
    assert api.post(f"/api/v1/buckets/{bucket.pk}/search", {"query": "x"}, format="json").status_code == 429
    assert api.post(memories_url(bucket), {"content": "still writable"}, format="json").status_code == 201
    assert refused(tenant)["reads"] == 2


def test_writes_over_writes_per_minute_answer_429_and_write_nothing(api, tenant, bucket, mid_minute):
    set_quotas(tenant, writes_per_minute=1)
    assert api.post(memories_url(bucket), {"content": "first"}, format="json").status_code == 201
    response = api.post(memories_url(bucket), {"content": "second"}, format="json")
    assert response.status_code == 429 and response.json()["code"] == "quota_writes_per_minute"
    assert "Retry-After" in response
    assert list(Memory.objects.filter(bucket=bucket).values_list("content", flat=True)) == ["first"]
    assert api.get(memories_url(bucket)).status_code == 200
    assert refused(tenant)["writes"] == 1


def test_one_tenants_quotas_and_counts_do_not_touch_another_tenant(
    tenant, other_tenant, bucket, other_bucket, mid_minute
):
    set_quotas(tenant, writes_per_minute=1, max_batch=1)
    mine, theirs = make_client(tenant), make_client(other_tenant)
    assert mine.post(memories_url(bucket), {"content": "mine"}, format="json").status_code == 201
    assert mine.post(memories_url(bucket), {"content": "again"}, format="json").status_code == 429
    for i in range(3):
        assert theirs.post(memories_url(other_bucket), batch(f"t{i}", f"u{i}"), format="json").status_code == 201
    assert sum(refused(other_tenant).values()) == 0
    assert refused(tenant)["writes"] == 1


def test_quota_values_are_validated():
    assert quotas_clean({"max_batch": 5, "max_memories": None, "reads_per_minute": 0}) == {"max_batch": 5}
    for bad in ({"max_batch": -1}, {"max_batch": "5"}, {"max_batch": True}, {"nonsense": 1}):
        with pytest.raises(ValueError):
            quotas_clean(bad)
