"""Reads of a tenant's webhook subscriptions and deliveries (404 for anything outside the tenant)."""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet

from engram_site.exceptions import NotFound
from tenants.models import ApiToken, Tenant
from tenants.selectors import parse_row_id, parse_uuid
from webhooks.models import WebhookAttempt, WebhookDelivery, WebhookSubscription


def subscription_list(*, tenant: Tenant) -> QuerySet[WebhookSubscription]:
    return WebhookSubscription.objects.for_tenant(tenant).order_by("created_at", "id")


def _reaches_webhooks(token: ApiToken | None) -> bool:
    """A token restricted to one bucket does not reach the tenant's webhooks (they carry every
    bucket's events): to it they are missing, like another bucket's objects."""
    return token is None or token.bucket_id is None


def subscription_get(*, tenant: Tenant, webhook_id, token: ApiToken | None = None) -> WebhookSubscription:
    pk = parse_uuid(webhook_id)
    subscription = None
    if pk is not None and _reaches_webhooks(token):
        subscription = WebhookSubscription.objects.for_tenant(tenant).filter(pk=pk).first()
    if subscription is None:
        raise NotFound("Webhook not found.")
    return subscription


def delivery_list(*, subscription: WebhookSubscription, status: str | None = None) -> QuerySet[WebhookDelivery]:
    """The subscription's deliveries, newest first, each with its attempts (idx_webhook_deliveries_sub)."""
    deliveries = WebhookDelivery.objects.filter(subscription=subscription, tenant_id=subscription.tenant_id)
    if status:
        deliveries = deliveries.filter(status=status)
    attempts = Prefetch("attempt_rows", queryset=WebhookAttempt.objects.order_by("id"))
    return deliveries.order_by("-id").prefetch_related(attempts)


def delivery_get(*, tenant: Tenant, delivery_id, token: ApiToken | None = None) -> WebhookDelivery:
    pk = parse_row_id(delivery_id)
    delivery = None
    if pk is not None and _reaches_webhooks(token):
        delivery = WebhookDelivery.objects.for_tenant(tenant).filter(pk=pk).select_related("subscription").first()
    if delivery is None:
        raise NotFound("Delivery not found.")
    return delivery
