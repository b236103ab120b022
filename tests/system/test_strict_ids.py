"""Numbers in paths and query strings are read in one written form, as UUIDs already are
(issue 46, item 10): ASCII digits, nothing around them. Python's int() also takes other
scripts' digits (``١``, ``３``), spaces and a sign, so one row answered to many addresses."""

from __future__ import annotations

import json

import pytest

from maintenance.models import ConflictCandidate
from memories.services import MemoryInput, memories_ingest
from tests.factories import make_client
from webhooks.models import DeliveryStatus, WebhookDelivery, WebhookSubscription

pytestmark = pytest.mark.django_db


def _lenient(n: int) -> list[str]:
    text = str(n)
    return [
        "".join(chr(0x0660 + int(d)) for d in text),  # Arabic-Indic digits
        "".join(chr(0xFF10 + int(d)) for d in text),  # full-width digits
        f" {text}", f"{text} ", f"+{text}", f"0{text}", f"{text}.0",
        f"{text}%0A",  # a newline, escaped (a client's URL parser drops a raw one before sending)
    ]  # fmt: skip


@pytest.fixture
def conflict(bucket):
    ids = sorted(
        r.id
        for r in memories_ingest(
            bucket=bucket, items=[MemoryInput(content="I never eat meat."), MemoryInput(content="I had a steak.")]
        )
    )
    return ConflictCandidate.objects.create(
        tenant_id=bucket.tenant_id, bucket_id=bucket.pk, memory_a_id=ids[0], memory_b_id=ids[1], code="diet",
        reason="diet", score=0.9,
    )  # fmt: skip


def test_a_conflict_id_is_found_only_in_ascii_digits(api, bucket, conflict):
    url = f"/api/v1/buckets/{bucket.pk}/conflicts/{{}}/resolve"
    for form in _lenient(conflict.pk):
        response = api.post(url.format(form), {"action": "keep_both"}, format="json")
        assert response.status_code == 404, (form, response.content)
    conflict.refresh_from_db()
    assert conflict.status == "open"
    assert api.post(url.format(conflict.pk), {"action": "keep_both"}, format="json").status_code == 200


def test_a_webhook_delivery_id_is_found_only_in_ascii_digits(admin_api, tenant):
    hook = WebhookSubscription.objects.create(tenant=tenant, url="http://127.0.0.1:9/x", secret="whsec_t")
    delivery = WebhookDelivery.objects.create(
        subscription=hook, tenant=tenant, event_id=1, event_kind="created", status=DeliveryStatus.FAILED
    )
    for form in _lenient(delivery.pk):
        response = admin_api.post(f"/api/v1/webhook-deliveries/{form}/retry")
        assert response.status_code == 404, (form, response.content)
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.FAILED
    assert admin_api.post(f"/api/v1/webhook-deliveries/{delivery.pk}/retry").status_code == 200


def test_feed_cursors_and_limits_are_read_in_ascii_digits_only(api, bucket):
    memories_ingest(bucket=bucket, items=[MemoryInput(content="One."), MemoryInput(content="Two.")])
    feed = f"/api/v1/buckets/{bucket.pk}/events"
    first = api.get(feed, {"limit": "1"})
    assert first.status_code == 200 and len(first.json()["events"]) == 1
    cursor = first.json()["next_cursor"]
    assert api.get(feed, {"after": cursor}).status_code == 200
    xid, event = cursor.split(".")
    fullwidth = "".join(chr(0xFF10 + int(d)) for d in xid) + "." + event
    for after in (fullwidth, f"{cursor} ", f" {cursor}", f"{cursor}\n"):
        response = api.get(feed, {"after": after})
        assert (response.status_code, response.json()["code"]) == (400, "invalid_cursor"), repr(after)
    for limit in ("\uff11", "\u0661", "1 ", " 1", "+1", "1.0"):
        response = api.get(feed, {"limit": limit})
        assert response.status_code == 400 and "limit" in response.json()["errors"], repr(limit)


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/api/v1/buckets", "limit"),
        ("/api/v1/buckets", "offset"),
        ("/api/v1/buckets/{bucket}/memories", "page_size"),
        ("/api/v1/buckets/{bucket}/sources", "page_size"),
    ],
)
def test_page_sizes_and_offsets_are_read_in_ascii_digits_only(api, bucket, path, name):
    path = path.format(bucket=bucket.pk)
    assert api.get(path, {name: "2"}).status_code == 200
    for value in ("\uff12", "\u0662", "2 ", " 2", "+2"):
        response = api.get(path, {name: value})
        assert response.status_code == 400 and name in response.json()["errors"], (value, response.content)


MCP_HEADERS = {"HTTP_ACCEPT": "application/json, text/event-stream", "HTTP_MCP_PROTOCOL_VERSION": "2025-11-25"}


@pytest.mark.parametrize("request_id", [{}, [], 1.5, 1.0, None, True, False])
def test_an_mcp_request_whose_id_is_not_a_string_or_an_integer_is_refused_not_taken_for_a_notification(
    tenant, request_id
):
    client = make_client(tenant)
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/list"}
    response = client.post("/mcp", data=json.dumps(body), content_type="application/json", **MCP_HEADERS)
    assert response.status_code == 400, response.content
    answer = response.json()
    assert answer["jsonrpc"] == "2.0" and answer["id"] is None and answer["error"]["code"] == -32600


@pytest.mark.parametrize("request_id", [7, "seven", 0, -1])
def test_an_mcp_request_with_a_string_or_integer_id_is_answered_under_it(tenant, request_id):
    client = make_client(tenant)
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/list"}
    response = client.post("/mcp", data=json.dumps(body), content_type="application/json", **MCP_HEADERS)
    assert response.status_code == 200 and response.json()["id"] == request_id
    notification = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    response = client.post("/mcp", data=json.dumps(notification), content_type="application/json", **MCP_HEADERS)
    assert response.status_code == 202
