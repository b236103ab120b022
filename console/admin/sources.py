"""Operator console for sources: progress and failures at a glance, retry, delete through the service."""

from __future__ import annotations

from django.contrib import admin, messages

from audit.services import Actor
from console.scoping import TenantScopedAdmin
from sources.models import Source, SourceStatus
from sources.services.delete import source_delete
from sources.services.sweep import sources_retry


@admin.register(Source)
class SourceAdmin(TenantScopedAdmin):
    list_display = ["__str__", "kind", "status", "progress_display", "memories_created", "bucket", "created_at"]
    list_filter = ["status", "kind"]
    search_fields = ["title", "id"]
    list_select_related = ["bucket"]
    show_full_result_count = False
    list_per_page = 50
    date_hierarchy = "created_at"
    exclude = ["text", "messages"]
    readonly_fields = [
        "id", "tenant", "bucket", "kind", "title", "metadata", "options", "content_hash", "status", "chunks_total",
        "chunks_done", "memories_created", "memories_deduplicated", "dropped", "error", "attempts", "distilled_by",
        "submitted_by", "created_at", "started_at", "heartbeat_at", "finished_at",
    ]  # fmt: skip
    actions = ["retry"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description="progress")
    def progress_display(self, obj):
        return f"{obj.chunks_done}/{obj.chunks_total}"

    @admin.action(description="Retry the selected unfinished sources")
    def retry(self, request, queryset):
        ids = list(queryset.exclude(status=SourceStatus.DONE).values_list("pk", flat=True))
        sources_retry(source_ids=ids)
        messages.success(request, f"Queued {len(ids)} source(s) for processing; the sweep retries them otherwise.")

    # Deleting goes through the service: the memories the source created go with it, audited.
    def delete_model(self, request, obj):
        source_delete(source=obj, actor=Actor.operator(request.user, request))

    def delete_queryset(self, request, queryset):
        for source in queryset:
            source_delete(source=source, actor=Actor.operator(request.user, request))
