"""Operator console for webhooks: subscriptions (created, changed and deleted through the
services, the secret shown once) and deliveries with every attempt, retried on demand."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, Q
from django.utils.html import format_html, format_html_join

from audit.services import Actor
from console.scoping import TenantScopedAdmin
from memories.models import EventKind
from webhooks import services
from webhooks.addresses import InvalidUrl, url_check
from webhooks.models import DeliveryStatus, WebhookDelivery, WebhookSubscription


def _actor(request) -> Actor:
    return Actor.operator(request.user, request)


class SubscriptionForm(forms.ModelForm):
    # Checked by url_check (http or https, a host, no private address), not by a URLField's regex.
    url = forms.CharField(max_length=2000, help_text="http(s)://… — the receiver the worker POSTs to.")
    events = forms.MultipleChoiceField(
        choices=EventKind.choices, required=False, widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every kind.",
    )  # fmt: skip

    class Meta:
        model = WebhookSubscription
        fields = ["tenant", "url", "events", "description", "is_active"]

    def clean_url(self):
        url = self.cleaned_data["url"]
        try:
            url_check(url)
        except InvalidUrl as exc:
            raise forms.ValidationError(exc.message) from None
        return url


@admin.register(WebhookSubscription)
class WebhookSubscriptionAdmin(TenantScopedAdmin):
    form = SubscriptionForm
    list_display = ["url", "tenant", "events_display", "is_active", "pending", "failed", "created_at"]
    list_filter = ["is_active", "tenant"]
    search_fields = ["url", "description"]
    list_select_related = ["tenant"]
    actions = ["rotate_secret"]

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(
                pending_count=Count("deliveries", filter=Q(deliveries__status=DeliveryStatus.PENDING)),
                failed_count=Count("deliveries", filter=Q(deliveries__status=DeliveryStatus.FAILED)),
            )
        )

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["tenant", "url", "events", "description"]
        return ["tenant", "url", "events", "description", "is_active", "created_at"]

    def get_readonly_fields(self, request, obj=None):
        return ["tenant", "created_at"] if obj is not None else []

    @admin.display(description="events")
    def events_display(self, obj):
        return ", ".join(obj.events) or "every kind"

    @admin.display(description="pending", ordering="pending_count")
    def pending(self, obj):
        return obj.pending_count

    @admin.display(description="failed", ordering="failed_count")
    def failed(self, obj):
        return obj.failed_count

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        if change:
            changed = {name: data[name] for name in form.changed_data if name in ("url", "events", "description",
                                                                                   "is_active")}  # fmt: skip
            fresh = WebhookSubscription.objects.get(pk=obj.pk)
            services.subscription_update(subscription=fresh, actor=_actor(request), **changed)
            return
        created = services.subscription_create(
            tenant=data["tenant"], url=data["url"], events=data["events"], description=data["description"],
            actor=_actor(request),
        )  # fmt: skip
        obj.pk = created.pk
        # Shown exactly once: the message is consumed when the next page renders.
        messages.warning(request, f"Signing secret (copy it now, it will not be shown again): {created.secret}")

    def delete_model(self, request, obj):
        services.subscription_delete(subscription=obj, actor=_actor(request))

    def delete_queryset(self, request, queryset):
        for subscription in queryset.select_related("tenant"):
            services.subscription_delete(subscription=subscription, actor=_actor(request))

    @admin.action(description="Rotate the signing secret of the selected subscription", permissions=["change"])
    def rotate_secret(self, request, queryset):
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one subscription.", messages.ERROR)
            return
        secret = services.subscription_rotate_secret(subscription=queryset.get(), actor=_actor(request))
        messages.warning(request, f"New signing secret (copy it now, it will not be shown again): {secret}")


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(TenantScopedAdmin):
    """Every delivery with its attempts: what the receiver answered, or the error, and when."""

    list_display = ["id", "subscription", "event_kind", "event_id", "status", "attempts", "last_status_code",
                    "next_attempt_at", "created_at"]  # fmt: skip
    list_filter = ["status", "event_kind", "tenant"]
    search_fields = ["subscription__url", "last_error"]
    list_select_related = ["subscription"]
    show_full_result_count = False
    list_per_page = 50
    date_hierarchy = "created_at"
    fields = ["subscription", "tenant", "event_id", "event_kind", "status", "attempts", "next_attempt_at",
              "last_status_code", "last_error", "created_at", "delivered_at", "attempt_table"]  # fmt: skip
    readonly_fields = fields
    actions = ["retry"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="attempts, oldest first")
    def attempt_table(self, obj):
        rows = obj.attempt_rows.order_by("id")
        if not rows:
            return "none yet"
        body = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{} ms</td><td>{}</td></tr>",
            ((a.number, a.at, a.status_code if a.status_code is not None else "—", a.duration_ms, a.error or "ok")
             for a in rows),
        )  # fmt: skip
        return format_html(
            "<table><thead><tr><th>#</th><th>at</th><th>status</th><th>took</th><th>error</th></tr></thead>"
            "<tbody>{}</tbody></table>",
            body,
        )

    def has_retry_permission(self, request):
        # Retrying changes the delivery: whoever may change the subscriptions may retry theirs.
        return request.user.has_perm("webhooks.change_webhooksubscription")

    @admin.action(description="Send the selected deliveries again", permissions=["retry"])
    def retry(self, request, queryset):
        count = 0
        for delivery in queryset.select_related("subscription__tenant"):
            services.delivery_retry(delivery=delivery, actor=_actor(request))
            count += 1
        messages.success(
            request, f"{count} deliver{'y' if count == 1 else 'ies'} will be sent at the worker's next run."
        )
