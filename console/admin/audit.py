"""The audit log in the console: browsable, filterable, read-only."""

from __future__ import annotations

import json

from django.contrib import admin
from django.utils.html import format_html

from audit.models import AuditEvent
from console.scoping import TenantScopedAdmin


class ActorFilter(admin.SimpleListFilter):
    """Filter by who did it (the most recent actors; search finds the rest). The choices come
    from the events the operator may see, so no other tenant's actor is named."""

    title = "actor"
    parameter_name = "actor"
    LIMIT = 50

    def lookups(self, request, model_admin):
        actors = (
            model_admin.get_queryset(request)
            .order_by("actor_kind", "actor_id")
            .values_list("actor_kind", "actor_id", "actor_label")
            .distinct()[: self.LIMIT]
        )
        return [(f"{kind}:{actor_id}", f"{kind}: {label or actor_id or '—'}") for kind, actor_id, label in actors]

    def queryset(self, request, queryset):
        if not self.value():
            return queryset
        kind, _, actor_id = self.value().partition(":")
        return queryset.filter(actor_kind=kind, actor_id=actor_id)


@admin.register(AuditEvent)
class AuditEventAdmin(TenantScopedAdmin):
    # Events outside any tenant (a tenant's deletion, system events) are for superusers only.
    list_display = ["created_at", "actor_display", "tenant", "action", "object_type", "objects_display"]
    list_filter = [
        ("tenant", admin.RelatedOnlyFieldListFilter),
        "action",
        "actor_kind",
        ActorFilter,
        ("created_at", admin.DateFieldListFilter),
    ]
    search_fields = ["action", "actor_label", "actor_id", "object_ids", "request_id"]
    date_hierarchy = "created_at"
    list_select_related = ["tenant"]
    list_per_page = 50
    show_full_result_count = False
    fields = [
        "created_at", "actor_kind", "actor_id", "actor_label", "tenant", "action", "object_type", "object_count",
        "object_ids_pretty", "details_pretty", "request_id", "ip_address",
    ]  # fmt: skip
    readonly_fields = fields

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="actor", ordering="actor_label")
    def actor_display(self, obj):
        return f"{obj.get_actor_kind_display()}: {obj.actor_label or obj.actor_id or '—'}"

    @admin.display(description="objects")
    def objects_display(self, obj):
        shown = ", ".join(str(i)[:8] for i in obj.object_ids[:3])
        more = obj.object_count - min(len(obj.object_ids), 3)
        return f"{shown} (+{more})" if more > 0 else shown

    @admin.display(description="object ids")
    def object_ids_pretty(self, obj):
        note = f" (first {len(obj.object_ids)} of {obj.object_count})" if obj.object_count > len(obj.object_ids) else ""
        return format_html("<pre>{}</pre>{}", "\n".join(map(str, obj.object_ids)), note)

    @admin.display(description="details")
    def details_pretty(self, obj):
        return format_html("<pre>{}</pre>", json.dumps(obj.details, indent=2, sort_keys=True, default=str))
