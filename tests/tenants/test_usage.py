"""Usage per tenant and day (tenants/usage.py): counted from real API traffic, flushed in
batches, drawn as SVG charts on the console's Usage page and each tenant's page, scoped to
the tenants an operator operates; and the same pages in a real browser."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest
from django.utils import timezone

from memories.models import Memory
from memories.services.buckets import bucket_create
from memories.storage import usage_storage_refresh
from tenants import services as tenant_services
from tenants import usage
from tenants.models import TenantUsage
from tests.factories import make_client, make_operator
from tests.support.browser import SKIP_REASON


@pytest.fixture(autouse=True)
def _no_pending_usage():
    usage.discard()
    yield
    usage.discard()


def today_row(tenant) -> TenantUsage:
    usage.flush()
    return TenantUsage.objects.get(tenant=tenant, day=timezone.now().date())


def traffic(api, bucket, *, writes=3, searches=2) -> None:
    memories = [{"content": f"Fact number {i} about the lighthouse keeper."} for i in range(writes)]
    assert api.post(f"/api/v1/buckets/{bucket.pk}/memories", {"memories": memories}, format="json").status_code == 201
    for _ in range(searches):
        found = api.post(f"/api/v1/buckets/{bucket.pk}/search", {"query": "lighthouse keeper"}, format="json")
        assert found.status_code == 200


@pytest.mark.django_db
def test_api_traffic_is_counted_per_tenant_and_day(
    api, tenant, bucket, other_bucket, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        traffic(api, bucket, writes=3, searches=2)
        # A duplicate is not a new memory.
        api.post(f"/api/v1/buckets/{bucket.pk}/memories", {"content": "Fact number 0 about the lighthouse keeper."},
                 format="json")  # fmt: skip
    row = today_row(tenant)
    assert (row.memories_written, row.searches) == (3, 2)
    assert sum(row.latency_histogram) == 2 and len(row.latency_histogram) == usage.BUCKETS
    assert row.tokens_returned > 0
    assert not TenantUsage.objects.filter(tenant=other_bucket.tenant).exists()
    # A second flush adds to the same row.
    usage.record_search(tenant_id=tenant.pk, milliseconds=1.0, tokens=5)
    row = today_row(tenant)
    assert row.searches == 3 and TenantUsage.objects.filter(tenant=tenant).count() == 1


@pytest.mark.django_db
def test_storage_is_measured_into_the_days_row(tenant, bucket, api):
    api.post(f"/api/v1/buckets/{bucket.pk}/memories", {"content": "héllo"}, format="json")
    assert usage_storage_refresh(tenant_ids=[tenant.pk]) == 1
    row = TenantUsage.objects.get(tenant=tenant)
    assert (row.memories_stored, row.storage_bytes) == (1, len("héllo".encode()))
    # Not again within MEASURE_SECONDS.
    assert usage_storage_refresh(tenant_ids=[tenant.pk]) == 0


def test_percentiles_come_from_the_histogram():
    histogram = [0] * usage.BUCKETS
    assert usage.percentile(histogram, 0.5) is None
    # 100 searches: 90 between 10 and 25 ms, 10 between 200 and 400 ms.
    histogram[usage.latency_bucket(20)] = 90
    histogram[usage.latency_bucket(300)] = 10
    p50, p95 = usage.percentile(histogram, 0.5), usage.percentile(histogram, 0.95)
    assert 10 < p50 <= 25 and 200 < p95 <= 400
    assert usage.latency_bucket(5) == 0 and usage.latency_bucket(10_000) == usage.BUCKETS - 1
    histogram = [0] * usage.BUCKETS
    histogram[-1] = 1
    assert usage.percentile(histogram, 0.95) == usage.LATENCY_BOUNDS_MS[-1]


def bar_heights(html: str, chart: str) -> list[float]:
    figure = re.search(rf'<figure class="usage-chart" id="chart-{chart}">(.*?)</figure>', html, re.S).group(1)
    return [float(h) for h in re.findall(r'<rect class="bar[^"]*"[^>]* height="([\d.]+)"', figure)]


@pytest.mark.django_db
def test_usage_pages_draw_charts_for_the_operators_tenants_only(client, tenant, other_tenant, bucket):
    traffic(make_client(tenant), bucket, writes=2, searches=1)
    outsider = tenant_services.tenant_create(name="Zeta <b>corp</b>")
    traffic(make_client(outsider), bucket_create(tenant=outsider, name="z"), writes=1, searches=4)
    client.force_login(make_operator("op", tenant))
    response = client.get("/admin/console/usage/")
    assert response.status_code == 200
    html = response.content.decode()
    assert [row["tenant"] for row in response.context["rows"]] == [tenant]
    assert "Zeta" not in html
    assert bar_heights(html, "searches") and all(h > 0 for h in bar_heights(html, "searches"))
    assert response.context["days"][-1].searches == 1  # the outsider's 4 are not added in
    # One tenant: its page, and another tenant's id answers 404.
    assert client.get("/admin/console/usage/", {"tenant": str(tenant.pk)}).status_code == 200
    assert client.get("/admin/console/usage/", {"tenant": str(outsider.pk)}).status_code == 404
    assert client.get("/admin/console/usage/", {"tenant": "not-a-uuid"}).status_code == 404
    # The tenant's own page carries the charts too.
    page = client.get(f"/admin/tenants/tenant/{tenant.pk}/change/").content.decode()
    assert 'id="tenant-usage"' in page and bar_heights(page, "searches")


@pytest.mark.django_db
def test_quotas_are_set_in_the_tenant_form_and_refusals_show_on_its_page(admin_client, tenant, bucket):
    url = f"/admin/tenants/tenant/{tenant.pk}/change/"
    form = {"name": tenant.name, "slug": tenant.slug, "is_active": "on", "max_batch": "1", "max_memories": "",
            "reads_per_minute": "", "writes_per_minute": "", "max_document_bytes": ""}  # fmt: skip
    assert admin_client.post(url, {**form, "max_batch": "-3"}).status_code == 200  # redisplayed with the error
    tenant.refresh_from_db()
    assert tenant.settings.get("quotas", {}) == {}
    assert admin_client.post(url, form).status_code == 302
    tenant.refresh_from_db()
    assert tenant.settings["quotas"] == {"max_batch": 1}
    refused = make_client(tenant).post(
        f"/api/v1/buckets/{bucket.pk}/memories", {"memories": [{"content": "a"}, {"content": "b"}]}, format="json"
    )
    assert refused.status_code == 403 and not Memory.objects.exists()
    page = admin_client.get(url).content.decode()
    assert 'id="usage-refusals-today"' in page and "batch 1" in page
    assert bar_heights(page, "refusals")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON or "ok")
def test_the_usage_page_draws_real_traffic_in_a_browser(console, superuser):
    tenant = tenant_services.tenant_create(name="Acme")
    bucket = bucket_create(tenant=tenant, name="main")
    secret = tenant_services.token_issue(tenant=tenant, name="agent", scopes=["read", "write"]).secret

    def call(path: str, body: dict) -> dict:
        request = urllib.request.Request(
            console.base + path, data=json.dumps(body).encode(), method="POST",
            headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    # Real requests to the live server (a thread of this process: its buffer is the one flushed here).
    call(
        f"/api/v1/buckets/{bucket.pk}/memories", {"memories": [{"content": f"Fact {i} about tides."} for i in range(4)]}
    )
    for query in ("tides", "fact", "moon"):
        call(f"/api/v1/buckets/{bucket.pk}/search", {"query": query})
    usage.flush()
    row = TenantUsage.objects.get(tenant=tenant)
    assert (row.memories_written, row.searches) == (4, 3)

    console.login(superuser)
    console.open("/admin/console/usage/")
    console.find("#chart-searches svg")
    shot = console.shot("usage")
    assert shot.stat().st_size > 0
    for chart in ("writes", "searches", "latency", "tokens", "storage"):
        bars = console.all(f"#chart-{chart} rect.bar")
        assert bars, chart
        # Today is the last group, drawn with a positive height in the rendered page.
        assert max(float(b.get_attribute("height")) for b in bars) > 0
        assert bars[-1].rect["height"] > 0, chart
    assert "Acme" in console.text("#usage-tenants")
    console.open(f"/admin/tenants/tenant/{tenant.pk}/change/")
    console.find("#tenant-usage svg")
    console.shot("tenant-usage")
    assert console.all("#tenant-usage #chart-writes rect.bar")


@pytest.mark.django_db
def test_a_tenant_operator_cannot_change_its_tenants_quotas(client, tenant):
    tenant.settings = {"quotas": {"max_batch": 5}}
    tenant.save()
    client.force_login(make_operator("op", tenant))
    form = {"name": "Renamed", "slug": tenant.slug, "is_active": "on", "max_batch": "", "max_memories": "999"}
    assert client.post(f"/admin/tenants/tenant/{tenant.pk}/change/", form).status_code == 302
    tenant.refresh_from_db()
    assert tenant.name == "Renamed" and tenant.settings["quotas"] == {"max_batch": 5}
