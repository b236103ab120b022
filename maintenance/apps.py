from django.apps import AppConfig


class MaintenanceConfig(AppConfig):
    name = "maintenance"
    verbose_name = "Maintenance"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from maintenance import receivers  # noqa: F401  (connects to memories.signals)
