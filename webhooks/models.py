"""Webhook subscriptions of a tenant, the deliveries of change-feed events to them, and every
attempt of each delivery (docs/API.md, "Webhooks")."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.functions import RandomUUID
from django.db import models
from django.db.models import Q

from engram_site.db import TransactionNow
from engram_site.querysets import TenantScopedQuerySet
from engram_site.scoping import scoped_manager
from tenants.models import Tenant


class WebhookSubscription(models.Model):
    """A URL the worker POSTs the tenant's change-feed events to, signed with ``secret``.

    ``cursor_xid``/``cursor_id`` is how far through the tenant's feed the dispatcher has
    turned events into deliveries (memories/feed_reader.py's positions); a new subscription starts
    at the feed's present, so it gets the events written after it was created.
    """

    id = models.UUIDField(primary_key=True, db_default=RandomUUID(), editable=False)
    tenant = models.ForeignKey(
        Tenant, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    url = models.URLField(max_length=2000)
    # Event kinds to send (memories.models.EventKind); empty: every kind.
    events = ArrayField(models.CharField(max_length=20), default=list, blank=True)
    description = models.CharField(max_length=200, blank=True, default="")
    # The HMAC-SHA256 key of the signatures. Shown once, when the subscription is created (or
    # the secret rotated); stored as it is, since signing needs it.
    secret = models.CharField(max_length=100, editable=False)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(db_default=TransactionNow())
    cursor_xid = models.BigIntegerField(default=0, editable=False)
    cursor_id = models.BigIntegerField(default=0, editable=False)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        db_table = "webhook_subscriptions"
        indexes = [
            # A tenant's subscriptions (API list, console), and the dispatcher's active ones.
            models.Index(fields=["tenant", "created_at"], name="idx_webhook_subs_tenant"),
        ]

    def __str__(self) -> str:
        return self.url


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "pending"
    DELIVERED = "delivered", "delivered"
    FAILED = "failed", "failed"


class WebhookDelivery(models.Model):
    """One event for one subscription: pending until a 2xx answer (delivered) or until the
    last attempt failed (failed). Unique per (subscription, event): an event is sent to a
    subscription at most once as a delivery (retries are attempts of it)."""

    id = models.BigAutoField(primary_key=True)
    subscription = models.ForeignKey(
        WebhookSubscription, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="deliveries"
    )
    tenant = models.ForeignKey(
        Tenant, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    event_id = models.BigIntegerField()
    event_kind = models.CharField(max_length=20)
    status = models.CharField(max_length=20, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.IntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_status_code = models.IntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(db_default=TransactionNow())
    delivered_at = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        db_table = "webhook_deliveries"
        verbose_name_plural = "webhook deliveries"
        constraints = [
            models.UniqueConstraint(fields=["subscription", "event_id"], name="webhook_deliveries_unique_event"),
        ]
        indexes = [
            # The sender: WHERE status = 'pending' AND next_attempt_at <= now() ORDER BY next_attempt_at.
            models.Index(fields=["next_attempt_at"], name="idx_webhook_deliveries_due", condition=Q(status="pending")),
            # A subscription's deliveries, newest first (API, console).
            models.Index(fields=["subscription", "-id"], name="idx_webhook_deliveries_sub"),
            # The retention trim: WHERE created_at < cutoff.
            models.Index(fields=["created_at"], name="idx_webhook_deliveries_created"),
        ]

    def __str__(self) -> str:
        return f"event {self.event_id} to {self.subscription_id}: {self.status}"


class WebhookAttempt(models.Model):
    """One POST of a delivery: when, what the receiver answered (or the error), how long it took."""

    id = models.BigAutoField(primary_key=True)
    delivery = models.ForeignKey(
        WebhookDelivery, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="attempt_rows"
    )
    number = models.IntegerField()
    at = models.DateTimeField()
    status_code = models.IntegerField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    duration_ms = models.IntegerField()

    objects = scoped_manager(tenant="delivery__tenant_id")

    class Meta:
        db_table = "webhook_attempts"
        indexes = [
            # A delivery's attempts in order.
            models.Index(fields=["delivery", "id"], name="idx_webhook_attempts_delivery"),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of delivery {self.delivery_id}"
