from django.apps import AppConfig
from django.core import checks


class MemoriesConfig(AppConfig):
    name = "memories"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Imported here, not at the top: app modules load once the app registry is ready.
        from engram_site import warmup
        from memories import embedding, tasks  # noqa: F401  (tasks: registers the task hooks queue by name)

        warmup.register(embedding.warm_up_when_enabled)
        checks.register(embedding.check_configured_model)
