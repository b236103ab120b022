"""Operator console for maintenance: job runs (read-only) and near-duplicate review."""

from __future__ import annotations

import json

from django.contrib import admin, messages
from django.utils.html import format_html

from maintenance import services
from maintenance.models import DuplicateCandidate, DuplicateStatus, JobRun, JobStatus

STATUS_COLOURS = {JobStatus.RUNNING: "#2563eb", JobStatus.SUCCEEDED: "#15803d", JobStatus.FAILED: "#b91c1c"}


@admin.register(JobRun)
class JobRunAdmin(admin.ModelAdmin):
    list_display = ["name", "status_badge", "trigger", "started_at", "duration", "progress_percent", "summary", "host"]
    list_filter = ["status", "name", "trigger"]
    search_fields = ["name", "error"]
    date_hierarchy = "started_at"
    list_per_page = 50
    readonly_fields = [
        "name", "trigger", "status", "started_at", "finished_at", "heartbeat_at", "duration", "progress_percent",
        "counts_pretty", "error", "host", "pid",
    ]  # fmt: skip
    exclude = ["counts", "progress"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description="status", ordering="status")
    def status_badge(self, obj):
        return format_html(
            '<strong style="color: {}">{}</strong>', STATUS_COLOURS.get(obj.status, "inherit"), obj.status
        )

    @admin.display(description="duration")
    def duration(self, obj):
        seconds = obj.duration_seconds
        return "—" if seconds is None else f"{seconds:.1f}s"

    @admin.display(description="progress")
    def progress_percent(self, obj):
        return "—" if obj.progress is None else f"{obj.progress:.0%}"

    @admin.display(description="counts / error")
    def summary(self, obj):
        if obj.status == JobStatus.FAILED and obj.error:
            return obj.error.strip().splitlines()[-1][:160]
        return ", ".join(f"{k}={v}" for k, v in obj.counts.items() if not isinstance(v, dict))[:160]

    @admin.display(description="counts")
    def counts_pretty(self, obj):
        return format_html("<pre>{}</pre>", json.dumps(obj.counts, indent=2, sort_keys=True, default=str))


@admin.register(DuplicateCandidate)
class DuplicateCandidateAdmin(admin.ModelAdmin):
    list_display = ["pair", "similarity_display", "status", "bucket", "tenant", "created_at", "reviewed_at"]
    list_filter = ["status", "tenant"]
    list_select_related = ["memory_a", "memory_b", "bucket", "tenant"]
    readonly_fields = ["tenant", "bucket", "memory_a", "memory_b", "similarity", "created_at", "reviewed_at"]
    fields = readonly_fields + ["status"]
    actions = ["keep_both"]
    show_full_result_count = False
    list_per_page = 50

    def has_add_permission(self, request):
        return False

    @admin.display(description="memories")
    def pair(self, obj):
        return format_html("{}<br>{}", obj.memory_a.content[:120], obj.memory_b.content[:120])

    @admin.display(description="similarity", ordering="similarity")
    def similarity_display(self, obj):
        return f"{obj.similarity:.3f}"

    @admin.action(description="Keep both (not duplicates)")
    def keep_both(self, request, queryset):
        count = services.duplicate_candidates_resolve(
            candidates=queryset.filter(status=DuplicateStatus.PENDING), status=DuplicateStatus.KEPT_BOTH
        )
        self.message_user(request, f"{count} pair(s) marked as kept both.", messages.SUCCESS)
