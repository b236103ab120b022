from django.contrib import admin

from memories.models import Memory


@admin.register(Memory)
class MemoryAdmin(admin.ModelAdmin):
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
    readonly_fields = [
        "id",
        "tenant",
        "bucket",
        "text_hash",
        "text_lemmatized",
        "token_count",
        "created_at",
        "last_accessed_at",
        "linked_memory_ids",
    ]
    exclude = ["embedding"]

    @admin.display(description="content")
    def short_content(self, obj):
        return obj.content if len(obj.content) <= 100 else obj.content[:97] + "…"
