"""The memories' model pages: memories (edit, pin, delete, their history), deleted memories
(restore) and what buckets' rankings learned from their feedback (reset). Every change goes
through the memories services with the operator as the actor, so it is audited (and a memory's
recorded in its history)."""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import widgets
from django.core.exceptions import PermissionDenied
from django.db.models import DateTimeField, DurationField, ExpressionWrapper, F, Func
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import path, reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join

from audit.services import Actor
from console.actions import confirm_action, confirmed
from console.history import display_value, memory_history_rows
from console.scoping import TenantScopedAdmin, scope_queryset
from engram_site.exceptions import Conflict, NotFound
from engram_site.fields import EARLIEST_STORED, LATEST_STORED
from memories import services
from memories.models import DeletedMemory, LearnedRanking, Memory
from memories.services import ranking_learning
from memories.text import text_hash
from tenants.selectors import parse_uuid

# What "pinned" means: the highest importance there is (a bounded ranking boost, memories/ranking.py).
PINNED = 1.0
# Messages name at most this many memories a bulk restore left alone, one message each.
MAX_CONFLICT_MESSAGES = 10


def _actor(request) -> Actor:
    return Actor.operator(request.user, request)


def _when(value) -> str:
    return date_format(timezone.localtime(value), "Y-m-d H:i") + " UTC" if value else "—"


def _short(text: str, limit: int = 100) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _in_stored_range(value, name: str):
    # The range the API accepts (docs/API.md): the console must not store what it cannot show.
    if value is not None and not EARLIEST_STORED <= value < LATEST_STORED:
        raise forms.ValidationError(f"The {name} must be between 1900-01-01 and 2200-12-31 (UTC).")
    return value


class MemoryForm(forms.ModelForm):
    importance = forms.FloatField(
        min_value=0.0, max_value=1.0, required=False,
        help_text="How much the memory matters, 0 to 1: a bounded ranking boost. 1 is pinned; empty is not said.",
    )  # fmt: skip
    expires_at = forms.SplitDateTimeField(
        required=False, widget=widgets.AdminSplitDateTime,
        help_text="After this moment (UTC) the memory leaves searches and lists; the purge job deletes it once the "
                  "bucket's retention window has passed too. Empty: never.",
    )  # fmt: skip

    class Meta:
        model = Memory
        fields = list(services.EDITABLE_FIELDS)

    def clean_content(self):
        content = (self.cleaned_data.get("content") or "").strip()
        if not content:
            raise forms.ValidationError("The content must not be empty.")
        if self.instance.pk and "content" in self.changed_data:
            clash = (
                Memory.objects.filter(
                    tenant_id=self.instance.tenant_id, bucket_id=self.instance.bucket_id, text_hash=text_hash(content)
                )
                .exclude(pk=self.instance.pk)
                .values_list("pk", flat=True)
                .first()
            )
            if clash:
                raise forms.ValidationError(f"Another memory of this bucket already has this content ({clash}).")
        return content

    def clean_created_at(self):
        return _in_stored_range(self.cleaned_data.get("created_at"), "time")

    def clean_expires_at(self):
        return _in_stored_range(self.cleaned_data.get("expires_at"), "expiry")


class ImportanceFilter(admin.SimpleListFilter):
    title = "importance"
    parameter_name = "importance"

    def lookups(self, request, model_admin):
        return [("pinned", "pinned (1.0)"), ("set", "has an importance"), ("unset", "no importance")]

    def queryset(self, request, queryset):
        if self.value() == "pinned":
            return queryset.filter(importance=PINNED)
        if self.value() == "set":
            return queryset.filter(importance__isnull=False)
        if self.value() == "unset":
            return queryset.filter(importance__isnull=True)
        return queryset


class ExpiredFilter(admin.SimpleListFilter):
    title = "expired"
    parameter_name = "expired"

    def lookups(self, request, model_admin):
        return [("yes", "yes"), ("no", "no"), ("later", "no, but expires later")]

    def queryset(self, request, queryset):
        now = timezone.now()
        if self.value() == "yes":
            return queryset.filter(expires_at__lte=now)
        if self.value() == "no":
            return queryset.exclude(expires_at__lte=now)
        if self.value() == "later":
            return queryset.filter(expires_at__gt=now)
        return queryset


class _WithHistory:
    """A memory's history (console/history.py) on its page, live or deleted."""

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None:
            context["memory_history"] = memory_history_rows(tenant=obj.tenant, memory_id=obj.pk)
        return super().render_change_form(request, context, add, change, form_url, obj)


@admin.register(Memory)
class MemoryAdmin(_WithHistory, TenantScopedAdmin):
    form = MemoryForm
    change_form_template = "console/memory_change_form.html"
    list_display = [
        "short_content",
        "bucket",
        "tenant",
        "attributed_to",
        "classified_scope",
        "classified_topic",
        "importance_display",
        "expiry",
        "created_at",
    ]
    list_filter = [ImportanceFilter, ExpiredFilter, "classified_scope", "attributed_to", "classified_topic", "bucket"]
    search_fields = ["content"]
    list_select_related = ["bucket", "tenant"]
    # Counting a large table on every page load is the slowest thing the admin can do.
    show_full_result_count = False
    list_per_page = 50
    date_hierarchy = "created_at"
    fields = [
        "id", "tenant", "bucket", "lifecycle", *services.EDITABLE_FIELDS, "text_hash", "text_lemmatized", "token_count",
        "last_accessed_at", "linked_memory_ids", "superseded_at", "superseded_by", "context_text",
    ]  # fmt: skip
    readonly_fields = [
        "id",
        "tenant",
        "bucket",
        "lifecycle",
        "text_hash",
        "text_lemmatized",
        "token_count",
        "last_accessed_at",
        "linked_memory_ids",
        "superseded_at",
        "superseded_by",
        "context_text",
    ]
    actions = ["pin", "unpin"]

    def get_queryset(self, request):
        return super().get_queryset(request).defer("embedding", "context_embedding")

    def has_add_permission(self, request):
        # Memories are written through the API (dedup, lemmas, embeddings at ingest).
        return False

    def get_urls(self):
        # Before the model admin's own: its "<path:object_id>/" would take ".../pin/" too.
        pin = path("<path:object_id>/pin/", self.admin_site.admin_view(self.pin_view), name="memories_memory_pin")
        return [pin, *super().get_urls()]

    @admin.display(description="content")
    def short_content(self, obj):
        return _short(obj.content)

    @admin.display(description="importance", ordering="importance")
    def importance_display(self, obj):
        if obj.importance is None:
            return "—"
        return "pinned" if obj.importance >= PINNED else f"{obj.importance:.2f}"

    @admin.display(description="expires", ordering="expires_at")
    def expiry(self, obj):
        if obj.expires_at is None:
            return "—"
        if obj.expires_at <= timezone.now():
            return format_html('<strong class="danger">expired</strong> {}', _when(obj.expires_at))
        return _when(obj.expires_at)

    @admin.display(description="state")
    def lifecycle(self, obj):
        parts = ["pinned" if obj.importance is not None and obj.importance >= PINNED else "not pinned"]
        if obj.expires_at is None:
            parts.append("never expires")
        elif obj.expires_at > timezone.now():
            parts.append(f"expires {_when(obj.expires_at)}")
        else:
            purge = obj.expires_at + timedelta(days=obj.bucket.retention_days)
            parts.append(f"expired {_when(obj.expires_at)}: out of searches and lists, purged after {_when(purge)}")
        return "; ".join(parts)

    # Edits, pins and deletes go through the same services as the API, and are audited.

    def save_model(self, request, obj, form, change):
        changes = {name: form.cleaned_data[name] for name in form.changed_data if name in services.EDITABLE_FIELDS}
        if not changes:
            return
        services.memory_update(memory=obj, actor=_actor(request), **changes)

    def delete_model(self, request, obj):
        self.delete_queryset(request, Memory.objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset):
        memories = list(queryset.select_related("tenant").defer("embedding", "context_embedding"))
        services.memories_delete(memories=memories, actor=_actor(request))

    def change_view(self, request, object_id, form_url="", extra_context=None):
        try:
            return super().change_view(request, object_id, form_url, extra_context)
        except Http404:
            # A memory deleted since the link was made (a merge's absorbed memory, say): its page
            # among the deleted memories, if the operator may see it there.
            deleted = _visible_deleted(request, object_id)
            if deleted is None:
                raise
            return HttpResponseRedirect(reverse("admin:memories_deletedmemory_change", args=[deleted.pk]))

    def _set_importance(self, request, memories, importance: float | None) -> int:
        actor, done = _actor(request), 0
        for memory in memories:
            try:
                services.memory_update(memory=memory, actor=actor, importance=importance)
            except NotFound:
                continue  # deleted meanwhile
            done += 1
        return done

    @admin.action(description="Pin (importance 1.0)", permissions=["change"])
    def pin(self, request, queryset):
        done = self._set_importance(request, queryset.exclude(importance=PINNED), PINNED)
        self.message_user(request, f"Pinned {done} memor{'y' if done == 1 else 'ies'}.", messages.SUCCESS)

    @admin.action(description="Unpin (clear the importance)", permissions=["change"])
    def unpin(self, request, queryset):
        done = self._set_importance(request, queryset.filter(importance__isnull=False), None)
        self.message_user(
            request, f"Cleared the importance of {done} memor{'y' if done == 1 else 'ies'}.", messages.SUCCESS
        )

    def pin_view(self, request, object_id):
        """The memory page's Pin / Unpin button (POST ``action=pin|unpin``)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        memory = self.get_object(request, object_id)  # 404 outside the operator's tenants
        if not self.has_change_permission(request, memory):
            raise PermissionDenied
        action = request.POST.get("action")
        if action not in ("pin", "unpin"):
            raise Http404
        importance = PINNED if action == "pin" else None
        if memory.importance != importance:
            self._set_importance(request, [memory], importance)
        self.message_user(request, "Pinned." if action == "pin" else "Unpinned (importance cleared).", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:memories_memory_change", args=[memory.pk]))


def _visible_deleted(request, object_id) -> DeletedMemory | None:
    pk = parse_uuid(str(object_id))
    if pk is None or not request.user.has_perm("memories.view_memory"):
        return None
    return scope_queryset(DeletedMemory.objects.filter(pk=pk), user=request.user).first()


# --- deleted memories -----------------------------------------------------------------------------


class ReasonFilter(admin.SimpleListFilter):
    title = "reason"
    parameter_name = "reason"

    def lookups(self, request, model_admin):
        return [("deleted", "deleted"), ("merged", "merged into another memory")]

    def queryset(self, request, queryset):
        return queryset.filter(reason=self.value()) if self.value() else queryset


# What a deleted memory's page shows of the columns it had, besides its content.
SNAPSHOT_FIELDS = (
    "created_at", "attributed_to", "agent_id", "run_id", "source_actor_id", "classified_topic", "classified_scope",
    "hint_root", "hint_tags", "importance", "expires_at", "superseded_by", "metadata",
)  # fmt: skip

# When the purge job removes a deleted memory: its bucket's retention window after the delete.
RETENTION = Func(
    F("bucket__retention_days"), template="make_interval(days => %(expressions)s)", output_field=DurationField()
)
PURGE_AT = ExpressionWrapper(F("deleted_at") + RETENTION, output_field=DateTimeField())


@admin.register(DeletedMemory)
class DeletedMemoryAdmin(_WithHistory, TenantScopedAdmin):
    """Deleted memories, restorable until their bucket's retention window has passed: read-only,
    and restored (one from its page, or a selection) through ``memories.services.memory_restore``.

    A deleted memory is a memory: seeing them takes the permission to view memories, restoring
    one the permission to delete them (who may delete may undo it)."""

    change_form_template = "console/deleted_memory_form.html"
    list_display = ["short_content", "bucket", "tenant", "reason", "deleted_when", "purge_at", "history_link"]
    list_filter = [ReasonFilter, "tenant", "bucket"]
    search_fields = ["content"]
    list_select_related = ["bucket", "tenant"]
    show_full_result_count = False
    list_per_page = 50
    date_hierarchy = "deleted_at"
    ordering = ["-deleted_at", "id"]
    fields = ["id", "tenant", "bucket", "reason", "deleted_when", "purge_at", "content", "snapshot"]
    readonly_fields = fields
    actions = ["restore"]

    def get_queryset(self, request):
        # The row snapshot holds the vectors: the list never reads it.
        return super().get_queryset(request).defer("row").annotate(purge_at_=PURGE_AT)

    def get_search_results(self, request, queryset, search_term):
        # An id (as the API gives it) finds that memory; anything else searches the content.
        pk = parse_uuid(search_term.strip())
        if pk is not None:
            return queryset.filter(pk=pk), False
        return super().get_search_results(request, queryset, search_term)

    def get_urls(self):
        restore = path(
            "<path:object_id>/restore/", self.admin_site.admin_view(self.restore_view),
            name="memories_deletedmemory_restore",
        )  # fmt: skip
        return [restore, *super().get_urls()]

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        context["can_restore"] = obj is not None and self.has_restore_permission(request, obj)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def has_module_permission(self, request):
        return request.user.has_module_perms("memories")

    def has_view_permission(self, request, obj=None):
        return request.user.has_perm("memories.view_memory")

    def has_restore_permission(self, request, obj=None):
        return request.user.has_perm("memories.delete_memory")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        # The purge job removes them once the bucket's retention window has passed.
        return False

    @admin.display(description="content")
    def short_content(self, obj):
        return _short(obj.content)

    @admin.display(description="deleted", ordering="deleted_at")
    def deleted_when(self, obj):
        return _when(obj.deleted_at)

    @admin.display(description="purged after", ordering="purge_at_")
    def purge_at(self, obj):
        return _when(getattr(obj, "purge_at_", None) or obj.deleted_at + timedelta(days=obj.bucket.retention_days))

    @admin.display(description="history")
    def history_link(self, obj):
        return format_html('<a href="{}#memory-history">history</a>', reverse(
            "admin:memories_deletedmemory_change", args=[obj.pk]))  # fmt: skip

    @admin.display(description="as it was")
    def snapshot(self, obj):
        """The columns an operator tells memories apart by, those that were set (the row holds
        every column, vectors included)."""
        row = obj.row or {}
        pairs = [(name, display_value(name, row.get(name))) for name in SNAPSHOT_FIELDS if row.get(name) is not None]
        if not pairs:
            return "—"
        return format_html('<dl class="snapshot">{}</dl>', format_html_join("", "<dt>{}</dt><dd>{}</dd>", pairs))

    def _restore(self, request, deleted: DeletedMemory):
        """(memory, None) when restored, else (None, why), the why naming a live duplicate."""
        try:
            return services.memory_restore(deleted=deleted, actor=_actor(request)), None
        except Conflict as exc:
            existing = parse_uuid((exc.extra or {}).get("existing_id") or "")
            if existing is None:
                return None, format_html("“{}” was not restored: {}", _short(deleted.content, 80), exc.message)
            return None, format_html(
                "“{}” was not restored: the live memory <a href=\"{}\">{}</a> has the same text. Edit or delete "
                "that one first.",
                _short(deleted.content, 80), reverse("admin:memories_memory_change", args=[existing]), existing,
            )  # fmt: skip
        except NotFound:
            return None, format_html("“{}” was restored or purged meanwhile.", _short(deleted.content, 80))

    @admin.action(description="Restore the selected memories", permissions=["restore"])
    def restore(self, request, queryset):
        restored, problems = 0, []
        for deleted in queryset.select_related("bucket", "tenant").order_by("deleted_at", "id"):
            memory, why = self._restore(request, deleted)
            if memory is not None:
                restored += 1
            else:
                problems.append(why)
        if restored:
            self.message_user(request, f"Restored {restored} memor{'y' if restored == 1 else 'ies'}.", messages.SUCCESS)
        for why in problems[:MAX_CONFLICT_MESSAGES]:
            self.message_user(request, why, messages.ERROR)
        if len(problems) > MAX_CONFLICT_MESSAGES:
            more = len(problems) - MAX_CONFLICT_MESSAGES
            self.message_user(request, f"{more} more were not restored.", messages.ERROR)

    def restore_view(self, request, object_id):
        """The Restore button of a deleted memory's page."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        deleted = self.get_object(request, object_id)  # 404 outside the operator's tenants
        if not self.has_restore_permission(request, deleted):
            raise PermissionDenied
        memory, why = self._restore(request, deleted)
        if memory is None:
            self.message_user(request, why, messages.ERROR)
            if DeletedMemory.objects.filter(pk=deleted.pk).exists():
                return HttpResponseRedirect(reverse("admin:memories_deletedmemory_change", args=[deleted.pk]))
            return HttpResponseRedirect(reverse("admin:memories_deletedmemory_changelist"))
        self.message_user(request, "Restored, with its id and every field it had.", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:memories_memory_change", args=[memory.pk]))


@admin.register(LearnedRanking)
class LearnedRankingAdmin(TenantScopedAdmin):
    """What each bucket's ranking learned from its feedback (memories.services.ranking_learning):
    the settings, the scores that adopted or refused them, how many ratings, when. Read-only; the
    reset action empties a bucket's row (its searches use the defaults again, until its ratings
    change) after a confirmation, through the same service as the API's reset and
    ``manage.py learn_ranking --reset``."""

    list_display = ["bucket", "tenant", "outcome", "settings_display", "scores", "ratings", "questions", "learned_at"]
    list_filter = ["adopted", "tenant"]
    list_select_related = ["bucket", "tenant"]
    readonly_fields = [
        "tenant", "bucket", "adopted", "settings_display", "ratings", "train_queries", "held_queries",
        "train_before", "train_after", "held_before", "held_after", "candidates", "searches", "learned_at",
        "reset_at",
    ]  # fmt: skip
    fields = readonly_fields
    actions = ["reset"]
    ordering = ["-learned_at"]
    list_per_page = 50

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # the reset action, with its audit, instead
        return actions

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description="outcome", boolean=False, ordering="adopted")
    def outcome(self, obj):
        if obj.reset_at is not None:
            return "reset: defaults until new ratings"
        return "learned settings in use" if obj.adopted else "defaults kept"

    @admin.display(description="settings")
    def settings_display(self, obj):
        if not obj.settings:
            return "—"
        values = {**obj.settings.get("weights", {}), **{k: v for k, v in obj.settings.items() if k != "weights"}}
        return ", ".join(f"{name} {value:g}" for name, value in values.items())

    @admin.display(description="held-back score (defaults → learned); training")
    def scores(self, obj):
        if obj.reset_at is not None:
            return "—"
        return f"{obj.held_before:.3f} → {obj.held_after:.3f}; training {obj.train_before:.3f} → {obj.train_after:.3f}"

    @admin.display(description="questions (training / held back)")
    def questions(self, obj):
        return f"{obj.train_queries} / {obj.held_queries}"

    @admin.action(description="Reset what the selected buckets learned…", permissions=["delete"])
    def reset(self, request, queryset):
        rows = list(queryset.select_related("bucket", "bucket__tenant"))
        if not confirmed(request):
            return confirm_action(
                request,
                queryset=queryset.select_related("bucket", "tenant"),
                action="reset",
                title="Reset learned ranking",
                message=(
                    "These buckets' searches go back to the default weights (with the tenant's settings). "
                    "The nightly job learns them again once their ratings change."
                ),
                button=f"Yes, reset {len(rows)} bucket(s)",
                describe=lambda r: f"{r.bucket.name} — {r.tenant.name} ({self.outcome(r)})",
            )
        deleted = ranking_learning.ranking_learned_reset(
            buckets=[row.bucket for row in rows], actor=Actor.operator(request.user, request)
        )
        self.message_user(request, f"Reset the learned ranking of {deleted} bucket(s).", messages.SUCCESS)
        return None
