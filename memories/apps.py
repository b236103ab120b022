from django.apps import AppConfig


class MemoriesConfig(AppConfig):
    name = "memories"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Imported here, not at the top: app modules load once the app registry is ready.
        from engram_site import metrics, warmup
        from memories import receivers, selectors  # noqa: F401  (receivers: queue enrichment after writes)
        from memories.services.ingest import insert

        warmup.register(insert.warm_up_write_embedding)

        metrics.register_gauge(
            "engram_enrichment_backlog",
            "Memories waiting for a derived column (embedding, lemmas) the enrichment sweep fills.",
            (),
            selectors.enrichment_backlog,
        )
