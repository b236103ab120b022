"""Webhook subscriptions (created, changed, deleted by the API and the console) and the worker's
side: turning the tenant's change-feed events into deliveries, and sending them.

A write does nothing for webhooks but record its event (memories/services/feed_writer.py). The
worker's periodic task (webhooks/tasks.py) reads each active subscription's events after its
cursor, records one delivery per event (:func:`deliveries_dispatch`), and POSTs the deliveries
that are due (:func:`deliveries_send`), each attempt recorded. So a receiver that is down, slow
or broken can delay only its own deliveries, never a write.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from audit.services import Actor, audit_record
from engram_site.exceptions import DomainError
from memories import feed_reader
from memories.models import EventKind
from tenants.models import Tenant
from webhooks import signing
from webhooks.addresses import url_check
from webhooks.models import DeliveryStatus, WebhookAttempt, WebhookDelivery, WebhookSubscription

logger = logging.getLogger(__name__)

SECRET_PREFIX = "whsec_"
# Events turned into deliveries per subscription per run (the next run takes the rest).
DISPATCH_BATCH = 500
# Deliveries claimed at a time, and at most this many attempts per run (the next run, due
# 10 seconds later by default, goes on; runs may overlap).
SEND_BATCH = 20
SEND_PER_RUN = 500
# A claimed batch is not claimed again until every attempt of it could have timed out, and
# this much more: a worker that died mid-batch leaves the rest to a run after that.
CLAIM_MARGIN = timedelta(seconds=60)
# What of a receiver's answer, or of an error, an attempt keeps.
ERROR_LIMIT = 500


# --- subscriptions ------------------------------------------------------------------------------


def _kinds(events: list[str] | None) -> list[str]:
    events = list(dict.fromkeys(events or []))
    unknown = [e for e in events if e not in EventKind.values]
    if unknown:
        raise DomainError(f"Unknown event kind: {', '.join(unknown)}.", code="invalid")
    return events


def _new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


@transaction.atomic
def subscription_create(
    *, tenant: Tenant, url: str, events: list[str] | None = None, description: str = "", actor: Actor | None = None
) -> WebhookSubscription:
    """A subscription of ``tenant`` to its change feed from now on (events written after it);
    its ``secret`` is generated here. Audited as ``webhook.create``."""
    url_check(url)
    xid, event_id = feed_reader.feed_position()
    subscription = WebhookSubscription.objects.create(
        tenant=tenant, url=url, events=_kinds(events), description=description, secret=_new_secret(),
        cursor_xid=xid, cursor_id=event_id,
    )  # fmt: skip
    subscription.refresh_from_db(fields=["id", "created_at"])
    _audit(actor, "webhook.create", subscription, {"url": url, "events": subscription.events})
    return subscription


@transaction.atomic
def subscription_update(*, subscription: WebhookSubscription, actor: Actor | None = None, **changes):
    """Change ``url``, ``events``, ``description`` or ``is_active``. Audited as ``webhook.update``.
    A paused subscription's deliveries wait; while it is paused, events still become deliveries."""
    unknown = set(changes) - {"url", "events", "description", "is_active"}
    if unknown:
        raise ValueError(f"not editable: {sorted(unknown)}")
    if "url" in changes:
        url_check(changes["url"])
    if "events" in changes:
        changes["events"] = _kinds(changes["events"])
    for name, value in changes.items():
        setattr(subscription, name, value)
    subscription.save(update_fields=sorted(changes) or None)
    _audit(actor, "webhook.update", subscription, {"fields": sorted(changes)})
    return subscription


@transaction.atomic
def subscription_rotate_secret(*, subscription: WebhookSubscription, actor: Actor | None = None) -> str:
    """A new secret (returned, to be shown once): attempts from now on are signed with it."""
    subscription.secret = _new_secret()
    subscription.save(update_fields=["secret"])
    _audit(actor, "webhook.rotate_secret", subscription, {})
    return subscription.secret


@transaction.atomic
def subscription_delete(*, subscription: WebhookSubscription, actor: Actor | None = None) -> None:
    """Delete the subscription with its deliveries and their attempts. Audited as ``webhook.delete``."""
    _audit(actor, "webhook.delete", subscription, {"url": subscription.url})
    WebhookSubscription.objects.filter(pk=subscription.pk).delete()  # deliveries cascade in the database


def _audit(actor: Actor | None, action: str, subscription: WebhookSubscription, details: dict) -> None:
    if actor is not None:
        audit_record(
            actor=actor, action=action, tenant=subscription.tenant, object_type="webhook",
            object_ids=[subscription.pk], details=details,
        )  # fmt: skip


# --- dispatch: events -> deliveries --------------------------------------------------------------


def deliveries_dispatch(*, now: datetime | None = None) -> int:
    """Record a delivery of every event written since each active subscription's cursor (of the
    kinds it asked for) and move the cursor past them; one transaction per subscription, whose
    row lock keeps two runs apart. Returns how many deliveries were recorded."""
    now = now or timezone.now()
    created = 0
    for subscription_id in WebhookSubscription.objects.filter(is_active=True).values_list("pk", flat=True):
        created += _dispatch_one(subscription_id, now)
    return created


@transaction.atomic
def _dispatch_one(subscription_id, now: datetime) -> int:
    subscription = WebhookSubscription.objects.select_for_update(skip_locked=True).filter(pk=subscription_id).first()
    if subscription is None or not subscription.is_active:
        return 0  # another run holds it, or it went
    events = feed_reader.events_after(
        tenant_id=subscription.tenant_id, after=(subscription.cursor_xid, subscription.cursor_id), limit=DISPATCH_BATCH
    )
    if not events:
        return 0
    wanted = [e for e in events if not subscription.events or e.kind in subscription.events]
    rows = [
        WebhookDelivery(
            subscription_id=subscription.pk,
            tenant_id=subscription.tenant_id,
            event_id=e.id,
            event_kind=e.kind,
            next_attempt_at=now,
        )  # fmt: skip
        for e in wanted
    ]
    WebhookDelivery.objects.bulk_create(rows, ignore_conflicts=True)
    subscription.cursor_xid, subscription.cursor_id = events[-1].xid, events[-1].id
    subscription.save(update_fields=["cursor_xid", "cursor_id"])
    return len(rows)


# --- sending -------------------------------------------------------------------------------------


def backoff(attempts: int) -> timedelta:
    """The wait after the ``attempts``-th failed attempt: base * 2^(attempts-1), at most the cap."""
    base = settings.ENGRAM_WEBHOOKS_BACKOFF_SECONDS
    return timedelta(seconds=min(settings.ENGRAM_WEBHOOKS_BACKOFF_MAX_SECONDS, base * 2 ** min(attempts - 1, 40)))


def _claim(now: datetime, limit: int) -> list[int]:
    """Due deliveries of active subscriptions, pushed into the future for the length of an
    attempt so that no other run takes them meanwhile (committed before any POST)."""
    lease = now + timedelta(seconds=settings.ENGRAM_WEBHOOKS_TIMEOUT * limit) + CLAIM_MARGIN
    with transaction.atomic(), connection.cursor() as cur:
        # idx_webhook_deliveries_due: WHERE status = 'pending' AND next_attempt_at <= now.
        cur.execute(
            """
            UPDATE webhook_deliveries SET next_attempt_at = %s WHERE id IN (
                SELECT d.id FROM webhook_deliveries d JOIN webhook_subscriptions s ON s.id = d.subscription_id
                WHERE d.status = 'pending' AND d.next_attempt_at <= %s AND s.is_active
                ORDER BY d.next_attempt_at, d.id LIMIT %s FOR UPDATE OF d SKIP LOCKED
            ) RETURNING id
            """,
            [lease, now, limit],
        )
        return sorted(row[0] for row in cur.fetchall())


@dataclass
class SendReport:
    delivered: int = 0
    retrying: int = 0
    failed: int = 0

    def as_dict(self) -> dict:
        return {"delivered": self.delivered, "retrying": self.retrying, "failed": self.failed}


def deliveries_send(*, now: datetime | None = None, limit: int = SEND_PER_RUN) -> SendReport:
    """POST the due deliveries (oldest event first, a batch at a time, at most ``limit``), one
    attempt each, and record every attempt: a 2xx answer delivers; anything else schedules the
    next attempt after :func:`backoff`, or marks the delivery failed after
    ENGRAM_WEBHOOKS_MAX_ATTEMPTS. ``now`` is when the attempts count as made (tests move it
    forward instead of waiting)."""
    now = now or timezone.now()
    report = SendReport()
    with signing.Sender() as sender:
        sent = 0
        while sent < limit:
            ids = _claim(now, min(SEND_BATCH, limit - sent))
            if not ids:
                break
            sent += len(ids)
            deliveries = WebhookDelivery.objects.filter(pk__in=ids).select_related("subscription").order_by("event_id")
            events = feed_reader.events_get(event_ids=[d.event_id for d in deliveries])
            for delivery in deliveries:
                outcome = signing.post(sender, delivery=delivery, event=events.get(delivery.event_id))
                status = _record(delivery, outcome, now)
                setattr(report, status, getattr(report, status) + 1)
    return report


@transaction.atomic
def _record(delivery: WebhookDelivery, outcome: signing.Outcome, now: datetime) -> str:
    number = delivery.attempts + 1
    WebhookAttempt.objects.create(
        delivery=delivery, number=number, at=outcome.at, status_code=outcome.status_code,
        error=outcome.error[:ERROR_LIMIT], duration_ms=outcome.duration_ms,
    )  # fmt: skip
    fields = {"attempts": number, "last_status_code": outcome.status_code, "last_error": outcome.error[:ERROR_LIMIT]}
    if outcome.ok:
        fields.update(status=DeliveryStatus.DELIVERED, delivered_at=outcome.at, next_attempt_at=None)
        result = "delivered"
    elif outcome.final or number >= settings.ENGRAM_WEBHOOKS_MAX_ATTEMPTS:
        fields.update(status=DeliveryStatus.FAILED, next_attempt_at=None)
        result = "failed"
    else:
        fields.update(next_attempt_at=now + backoff(number))
        result = "retrying"
    WebhookDelivery.objects.filter(pk=delivery.pk).update(**fields)
    return result


@transaction.atomic
def delivery_retry(*, delivery: WebhookDelivery, actor: Actor | None = None) -> WebhookDelivery:
    """Send a failed (or pending) delivery again at the next run, with a fresh count of attempts."""
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        status=DeliveryStatus.PENDING, attempts=0, next_attempt_at=timezone.now()
    )
    delivery.refresh_from_db()
    _audit(actor, "webhook.retry", delivery.subscription, {"delivery_id": delivery.pk})
    return delivery


def deliveries_trim(*, now: datetime | None = None) -> int:
    """Delete deliveries (with their attempts) older than the change feed keeps events."""
    cutoff = (now or timezone.now()) - feed_retention()
    # idx_webhook_deliveries_created finds them; attempts cascade in the database.
    deleted, _ = WebhookDelivery.objects.filter(created_at__lt=cutoff).exclude(status=DeliveryStatus.PENDING).delete()
    return deleted


def feed_retention() -> timedelta:
    return timedelta(days=settings.ENGRAM_EVENTS_RETENTION_DAYS)


def webhooks_run(*, now: datetime | None = None) -> dict:
    """One run of the worker's task: dispatch, send what is due, trim what is old."""
    dispatched = deliveries_dispatch(now=now)
    sent = deliveries_send(now=now)
    return {"dispatched": dispatched, **sent.as_dict(), "trimmed": deliveries_trim(now=now)}
