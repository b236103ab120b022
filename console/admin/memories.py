from django import forms
from django.contrib import admin

from audit.services import Actor
from console.scoping import TenantScopedAdmin
from engram_site.fields import EARLIEST_STORED, LATEST_STORED
from memories import services
from memories.models import Memory
from memories.text import text_hash


class MemoryForm(forms.ModelForm):
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
        # The range the API accepts (docs/API.md): the console must not store what it cannot show.
        created_at = self.cleaned_data.get("created_at")
        if created_at is not None and not EARLIEST_STORED <= created_at < LATEST_STORED:
            raise forms.ValidationError("Must be between 1900-01-01 and 2200-12-31 (UTC).")
        return created_at


@admin.register(Memory)
class MemoryAdmin(TenantScopedAdmin):
    form = MemoryForm
    list_display = [
        "short_content",
        "bucket",
        "tenant",
        "attributed_to",
        "classified_scope",
        "classified_topic",
        "created_at",
    ]
    list_filter = ["classified_scope", "attributed_to", "classified_topic", "bucket"]
    search_fields = ["content"]
    list_select_related = ["bucket", "tenant"]
    # Counting a large table on every page load is the slowest thing the admin can do.
    show_full_result_count = False
    list_per_page = 50
    date_hierarchy = "created_at"
    fields = [
        "id", "tenant", "bucket", *services.EDITABLE_FIELDS, "text_hash", "text_lemmatized", "token_count",
        "last_accessed_at", "linked_memory_ids", "superseded_at", "superseded_by", "context_text",
    ]  # fmt: skip
    readonly_fields = [
        "id",
        "tenant",
        "bucket",
        "text_hash",
        "text_lemmatized",
        "token_count",
        "last_accessed_at",
        "linked_memory_ids",
        "superseded_at",
        "superseded_by",
        "context_text",
    ]

    def get_queryset(self, request):
        return super().get_queryset(request).defer("embedding", "context_embedding")

    def has_add_permission(self, request):
        # Memories are written through the API (dedup, lemmas, embeddings at ingest).
        return False

    @admin.display(description="content")
    def short_content(self, obj):
        return obj.content if len(obj.content) <= 100 else obj.content[:97] + "…"

    # Edits and deletes go through the same services as the API, and are audited.

    def save_model(self, request, obj, form, change):
        changes = {name: form.cleaned_data[name] for name in form.changed_data if name in services.EDITABLE_FIELDS}
        if not changes:
            return
        services.memory_update(memory=obj, actor=Actor.operator(request.user, request), **changes)

    def delete_model(self, request, obj):
        self.delete_queryset(request, Memory.objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset):
        memories = list(queryset.select_related("tenant").defer("embedding", "context_embedding"))
        services.memories_delete(memories=memories, actor=Actor.operator(request.user, request))
