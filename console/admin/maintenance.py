"""Operator console for maintenance: job runs (read-only) and near-duplicate review."""

from __future__ import annotations

import json

from django.contrib import admin, messages
from django.utils.html import format_html

from audit.services import Actor
from console.actions import confirm_action, confirmed
from console.scoping import TenantScopedAdmin
from engram_site.models import JobRun, JobStatus
from maintenance.models import DuplicateCandidate
from maintenance.services import duplicate_review


@admin.register(JobRun)
class JobRunAdmin(admin.ModelAdmin):
    """Job runs span every tenant: superusers only (``ConsoleAdminSite`` makes every admin
    that is not tenant-scoped so)."""

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
        # Coloured by console/static/console/console.css (no inline styles: the CSP refuses them).
        return format_html('<strong class="status-{}">{}</strong>', obj.status, obj.status)

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
class DuplicateCandidateAdmin(TenantScopedAdmin):
    """The raw list of candidates; operators review pending pairs side by side in the
    console's review queue (/admin/console/review/), which calls the same services."""

    list_display = ["pair", "similarity_display", "status", "bucket", "tenant", "created_at", "reviewed_at"]
    list_filter = ["status", "tenant"]
    list_select_related = ["memory_a", "memory_b", "bucket", "tenant"]
    readonly_fields = ["tenant", "bucket", "memory_a", "memory_b", "similarity", "status", "created_at", "reviewed_at"]
    fields = readonly_fields
    actions = ["keep_both", "merge_keep_older", "merge_keep_newer"]
    show_full_result_count = False
    list_per_page = 50

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        # Decisions are made by the actions (and the review queue), never by editing a row.
        return obj is None and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        # A deleted pair would be suggested again by the next scan: decide it instead.
        return False

    @admin.display(description="memories")
    def pair(self, obj):
        return format_html("{}<br>{}", obj.memory_a.content[:120], obj.memory_b.content[:120])

    @admin.display(description="similarity", ordering="similarity")
    def similarity_display(self, obj):
        return f"{obj.similarity:.3f}"

    @admin.action(description="Keep both (not duplicates)")
    def keep_both(self, request, queryset):
        result = duplicate_review.duplicates_keep_both(candidates=queryset, actor=Actor.operator(request.user, request))
        self.message_user(request, f"{result.done} pair(s) marked as kept both.", messages.SUCCESS)

    def _merge(self, request, queryset, keep: str, action: str):
        pending = queryset.undecided().select_related("memory_a", "memory_b")
        if not confirmed(request):
            return confirm_action(
                request,
                queryset=pending,
                action=action,
                title="Merge near-duplicates",
                message=(
                    f"For each pair, the {keep} memory absorbs the other (tags and links united, references "
                    "re-pointed) and the other memory is deleted."
                ),
                button=f"Yes, merge {len(pending)} pair(s)",
                describe=lambda c: f"{c.memory_a.content[:80]}  ~  {c.memory_b.content[:80]} ({c.similarity:.3f})",
            )
        result = duplicate_review.duplicates_merge(
            candidates=pending, keep=keep, actor=Actor.operator(request.user, request)
        )
        self.message_user(request, f"Merged {result.done} pair(s), {result.skipped} skipped.", messages.SUCCESS)
        return None

    @admin.action(description="Merge, keeping the older memory…", permissions=["change"])
    def merge_keep_older(self, request, queryset):
        return self._merge(request, queryset, "older", "merge_keep_older")

    @admin.action(description="Merge, keeping the newer memory…", permissions=["change"])
    def merge_keep_newer(self, request, queryset):
        return self._merge(request, queryset, "newer", "merge_keep_newer")
