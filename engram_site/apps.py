from django.apps import AppConfig


class EngramSiteConfig(AppConfig):
    """The platform layer as an app: it owns one table, the job runs its runner records."""

    name = "engram_site"
    verbose_name = "Platform"
    default_auto_field = "django.db.models.BigAutoField"
