from django.apps import AppConfig


class SourcesConfig(AppConfig):
    name = "sources"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Imported here, not at the top: models can only load once apps are ready.
        from memories import provenance
        from sources import receivers, selectors, tasks  # noqa: F401  (connect receivers; register tasks)

        provenance.register_source_lookup(selectors.memory_source)
