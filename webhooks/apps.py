from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "webhooks"
    verbose_name = "Webhooks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Imported here, not at the top: tasks can only load once apps are ready.
        from webhooks import tasks  # noqa: F401  (registers the delivery task by name)
