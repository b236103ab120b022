"""Webhooks: subscriptions through the API, deliveries sent by the worker's run to a receiver on
127.0.0.1 (tests.support.LoopbackServer), signed as docs/API.md says, retried with backoff until
a receiver that was down comes back, and never in a write's way."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from memories.models import MemoryEvent
from tests.factories import make_client, make_operator, write
from tests.support import LoopbackServer, free_port
from webhooks import services
from webhooks.models import DeliveryStatus, WebhookAttempt, WebhookDelivery, WebhookSubscription

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _loopback_receivers(settings):
    settings.ENGRAM_WEBHOOKS_ALLOW_PRIVATE = True
    settings.ENGRAM_WEBHOOKS_TIMEOUT = 2.0
    settings.ENGRAM_WEBHOOKS_BACKOFF_SECONDS = 1.0
    settings.ENGRAM_WEBHOOKS_BACKOFF_MAX_SECONDS = 4.0


class Receiver(LoopbackServer):
    """Records every POST (headers and raw body) and answers ``status``."""

    def __init__(self, port: int = 0, status: int = 200):
        self.requests: list[tuple[dict, bytes]] = []
        self.status = status
        lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with lock:
                    receiver.requests.append((dict(self.headers), body))
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        super().__init__(Handler, port=port)


def verify(secret: str, body: bytes, header: str, tolerance: int = 300) -> bool:
    """The receiver's check, as docs/API.md ("Verifying a delivery") spells it."""
    parts = dict(item.split("=", 1) for item in header.split(","))
    timestamp = int(parts["t"])
    if abs(time.time() - timestamp) > tolerance:
        return False
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, parts["v1"])


def _subscribe(admin_api, url: str, **extra) -> dict:
    response = admin_api.post("/api/v1/webhooks", {"url": url, **extra}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_receiver_down_for_a_while_gets_every_event_afterwards_with_valid_signatures(api, admin_api, bucket):
    port = free_port()  # nothing listens here yet: the receiver is down
    hook = _subscribe(admin_api, f"http://127.0.0.1:{port}/hook")
    first = write(bucket, "The boat leaves at dawn.", api=api)[0]
    second = write(bucket, "The harbour closes in winter.", api=api)[0]
    assert api.delete(f"/api/v1/memories/{first}").status_code == 204

    start = timezone.now()
    run = services.webhooks_run(now=start)
    assert run["dispatched"] == 3 and run["retrying"] == 3 and run["delivered"] == 0
    assert services.webhooks_run(now=start + timedelta(seconds=0.5))["retrying"] == 0  # backing off
    run = services.webhooks_run(now=start + timedelta(seconds=1.5))
    assert run["retrying"] == 3  # the second attempts, also refused
    assert set(WebhookDelivery.objects.values_list("attempts", flat=True)) == {2}
    assert WebhookAttempt.objects.count() == 6 and not WebhookAttempt.objects.filter(error="").exists()

    with Receiver(port=port) as receiver:
        run = services.webhooks_run(now=start + timedelta(seconds=10))
    assert run["delivered"] == 3
    assert set(WebhookDelivery.objects.values_list("status", flat=True)) == {DeliveryStatus.DELIVERED}

    events = list(MemoryEvent.objects.order_by("xid", "id"))
    got = [json.loads(body) for _headers, body in receiver.requests]
    assert sorted(g["id"] for g in got) == sorted(e.id for e in events)
    assert {(g["kind"], g["memory_id"]) for g in got} == {("created", first), ("created", second), ("deleted", first)}
    for headers, body in receiver.requests:
        assert verify(hook["secret"], body, headers["Engram-Signature"])
        assert not verify(hook["secret"] + "x", body, headers["Engram-Signature"])
        assert headers["Engram-Event-Id"] == str(json.loads(body)["id"])
        assert headers["Engram-Delivery-Attempt"] == "3"


def test_a_write_succeeds_with_the_receiver_down_and_queues_nothing_on_the_write_path(api, admin_api, bucket):
    _subscribe(admin_api, f"http://127.0.0.1:{free_port()}/down")
    memory_id = write(bucket, "Written while the receiver is down.", api=api)[0]
    assert MemoryEvent.objects.filter(memory_id=memory_id, kind="created").count() == 1
    # The write recorded its event and nothing else: deliveries are the worker's.
    assert not WebhookDelivery.objects.exists() and not WebhookAttempt.objects.exists()


def test_attempts_are_listed_and_a_delivery_fails_after_the_last_attempt(api, admin_api, bucket, settings):
    settings.ENGRAM_WEBHOOKS_MAX_ATTEMPTS = 2
    with Receiver(status=503) as receiver:
        hook = _subscribe(admin_api, receiver.url + "/hook")
        write(bucket, "A fact the receiver refuses.", api=api)[0]
        start = timezone.now()
        services.webhooks_run(now=start)
        assert services.webhooks_run(now=start + timedelta(seconds=5))["failed"] == 1
        assert services.webhooks_run(now=start + timedelta(minutes=5))["retrying"] == 0
    page = admin_api.get(f"/api/v1/webhooks/{hook['id']}/deliveries").json()
    [delivery] = page["results"]
    assert delivery["status"] == "failed" and delivery["attempts"] == 2 and delivery["last_status_code"] == 503
    assert [a["number"] for a in delivery["attempt_list"]] == [1, 2]
    assert all(a["status_code"] == 503 and a["error"].startswith("HTTP 503") for a in delivery["attempt_list"])
    assert len(receiver.requests) == 2

    retried = admin_api.post(f"/api/v1/webhook-deliveries/{delivery['id']}/retry")
    assert retried.status_code == 200 and retried.json()["status"] == "pending"
    with Receiver(port=int(receiver.url.rsplit(":", 1)[1])) as up:
        assert services.webhooks_run(now=timezone.now() + timedelta(seconds=1))["delivered"] == 1
    assert len(up.requests) == 1


def test_a_subscription_gets_only_the_kinds_it_asked_for_and_only_its_tenants(
    api, admin_api, bucket, other_bucket, other_tenant
):
    with Receiver() as receiver:
        _subscribe(admin_api, receiver.url, events=["deleted"])
        memory_id = write(bucket, "Soon deleted.", api=api)[0]
        api.delete(f"/api/v1/memories/{memory_id}")
        write(other_bucket, "Another tenant's fact.", api=make_client(other_tenant))[0]
        services.webhooks_run()
    got = [json.loads(body) for _headers, body in receiver.requests]
    assert [(g["kind"], g["memory_id"]) for g in got] == [("deleted", memory_id)]


def test_block_changes_are_delivered_to_subscriptions_of_their_kinds_and_only_the_tenants(
    api, admin_api, bucket, other_tenant
):
    outsider = make_client(other_tenant, scopes=("read", "write", "admin"))
    with Receiver() as blocks_hook, Receiver() as deletes_hook, Receiver() as memories_hook, Receiver() as theirs:
        _subscribe(admin_api, blocks_hook.url, events=["block_created", "block_updated", "block_deleted"])
        _subscribe(admin_api, deletes_hook.url, events=["block_deleted"])
        _subscribe(admin_api, memories_hook.url, events=["created", "updated", "deleted"])
        _subscribe(outsider, theirs.url)  # every kind, of the other tenant
        url = f"/api/v1/buckets/{bucket.pk}/blocks/persona?agent_id=alfa"
        created = api.put(url, {"content": "Calm and brief.", "reason": "first"}, format="json")
        edited = api.patch(url, {"append": "Kind."}, format="json", headers={"If-Match": created["ETag"]})
        assert api.delete(url, headers={"If-Match": edited["ETag"]}).status_code == 204
        memory_id = write(bucket, "A memory beside the block.", api=api)[0]
        services.webhooks_run()

    got = [json.loads(body) for _headers, body in blocks_hook.requests]
    block_id = created.json()["id"]
    assert [(g["kind"], g["block_id"], g["memory_id"]) for g in got] == [
        ("block_created", block_id, None), ("block_updated", block_id, None), ("block_deleted", block_id, None)
    ]  # fmt: skip
    assert got[0]["data"]["label"] == "persona" and got[0]["data"]["agent_id"] == "alfa"
    assert got[0]["data"]["reason"] == "first" and got[0]["data"]["actor"]["id"] == str(api.token.pk)
    assert got[1]["data"]["version"] == 2 and got[1]["data"]["fields"] == ["content"]
    assert [json.loads(body)["kind"] for _h, body in deletes_hook.requests] == ["block_deleted"]
    assert [(json.loads(body)["kind"], json.loads(body)["memory_id"]) for _h, body in memories_hook.requests] == [
        ("created", memory_id)
    ]
    assert theirs.requests == []


def test_a_subscription_to_an_unknown_block_kind_is_refused(admin_api):
    response = admin_api.post("/api/v1/webhooks", {"url": "http://127.0.0.1:9/x", "events": ["block_renamed"]},
                              format="json")  # fmt: skip
    assert response.status_code == 400
    assert not WebhookSubscription.objects.exists()


@pytest.mark.django_db(transaction=True)  # "before" must be a committed transaction of its own
def test_a_subscription_starts_with_events_written_after_it(api, admin_api, bucket):
    write(bucket, "Written before the subscription.", api=api)[0]
    with Receiver() as receiver:
        _subscribe(admin_api, receiver.url)
        later = write(bucket, "Written after the subscription.", api=api)[0]
        services.webhooks_run()
    assert [json.loads(body)["memory_id"] for _h, body in receiver.requests] == [later]


def test_a_paused_subscription_sends_nothing_until_resumed(api, admin_api, bucket):
    with Receiver() as receiver:
        hook = _subscribe(admin_api, receiver.url)
        write(bucket, "While paused.", api=api)[0]
        assert admin_api.patch(f"/api/v1/webhooks/{hook['id']}", {"is_active": False}, format="json").status_code == 200
        services.webhooks_run()
        assert receiver.requests == []
        admin_api.patch(f"/api/v1/webhooks/{hook['id']}", {"is_active": True}, format="json")
        services.webhooks_run()
    assert len(receiver.requests) == 1


def test_the_secret_is_shown_at_creation_and_rotation_only(admin_api):
    hook = _subscribe(admin_api, "http://127.0.0.1:9/hook")
    assert hook["secret"].startswith("whsec_")
    assert "secret" not in admin_api.get(f"/api/v1/webhooks/{hook['id']}").json()
    assert all("secret" not in h for h in admin_api.get("/api/v1/webhooks").json()["results"])
    rotated = admin_api.post(f"/api/v1/webhooks/{hook['id']}/secret").json()["secret"]
    assert rotated != hook["secret"]
    assert WebhookSubscription.objects.get(pk=hook["id"]).secret == rotated


@pytest.mark.parametrize(
    "url",
    ["ftp://example.com/x", "not a url", "http://user:pw@example.com/x", "http://127.0.0.1:8000/x",
     "http://10.1.2.3/x", "http://[::1]/x", "http://169.254.169.254/latest"],
)  # fmt: skip
def test_a_url_that_is_not_http_or_names_a_private_address_is_refused(admin_api, settings, url):
    settings.ENGRAM_WEBHOOKS_ALLOW_PRIVATE = False
    response = admin_api.post("/api/v1/webhooks", {"url": url}, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_url" or "url" in response.json()["errors"]
    assert not WebhookSubscription.objects.exists()


@pytest.mark.parametrize(
    "body", [{}, {"url": "http://127.0.0.1:9/x", "events": ["born"]}, {"url": "http://127.0.0.1:9/x", "extra": 1}]
)
def test_bad_subscription_input_answers_400_and_changes_nothing(admin_api, body):
    assert admin_api.post("/api/v1/webhooks", body, format="json").status_code == 400
    assert not WebhookSubscription.objects.exists()


def test_webhooks_need_the_admin_scope_and_a_whole_tenant_token(api, tenant, bucket):
    assert api.get("/api/v1/webhooks").status_code == 403
    client = make_client(tenant, scopes=("read", "write", "admin"), bucket=bucket)
    assert client.post("/api/v1/webhooks", {"url": "http://127.0.0.1:9/x"}, format="json").status_code == 403
    assert not WebhookSubscription.objects.exists()


def test_deleting_a_subscription_deletes_its_deliveries(api, admin_api, bucket):
    hook = _subscribe(admin_api, f"http://127.0.0.1:{free_port()}/down")
    write(bucket, "Something to deliver.", api=api)[0]
    services.webhooks_run()
    assert WebhookAttempt.objects.count() == 1
    assert admin_api.delete(f"/api/v1/webhooks/{hook['id']}").status_code == 204
    assert not WebhookDelivery.objects.exists() and not WebhookAttempt.objects.exists()


# --- the console ---------------------------------------------------------------------------------------


@pytest.fixture
def operator(client, tenant):
    client.force_login(make_operator("hooks-operator", tenant))
    return client


def test_an_operator_creates_a_subscription_and_sees_its_secret_once(operator, tenant):
    response = operator.post(
        "/admin/webhooks/webhooksubscription/add/",
        {"tenant": tenant.pk, "url": "http://127.0.0.1:9/hook", "events": ["created", "deleted"], "description": "x"},
        follow=True,
    )
    subscription = WebhookSubscription.objects.get()
    assert subscription.events == ["created", "deleted"] and subscription.tenant_id == tenant.pk
    assert subscription.secret in response.content.decode()
    assert AuditEvent.objects.filter(action="webhook.create", tenant=tenant).exists()
    page = operator.get(f"/admin/webhooks/webhooksubscription/{subscription.pk}/change/").content.decode()
    assert subscription.secret not in page


def test_the_delivery_page_lists_every_attempt_escaped(operator, admin_api, api, bucket):
    with Receiver(status=500) as receiver:
        _subscribe(admin_api, receiver.url)
        write(bucket, "A fact for a broken receiver.", api=api)[0]
        services.webhooks_run()
    delivery = WebhookDelivery.objects.get()
    WebhookAttempt.objects.filter(delivery=delivery).update(error="<script>alert(1)</script>")
    page = operator.get(f"/admin/webhooks/webhookdelivery/{delivery.pk}/change/").content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    assert operator.get("/admin/webhooks/webhookdelivery/").status_code == 200
