from django.apps import AppConfig
from django.core import checks


class EngramSiteConfig(AppConfig):
    """The platform layer as an app: it owns one table (the job runs its runner records) and
    registers what its providers need at start-up."""

    name = "engram_site"
    verbose_name = "Platform"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Imported here, not at the top: the provider reads settings and registers metrics.
        from engram_site import warmup
        from engram_site.providers import embedding

        warmup.register(embedding.warm_up_when_enabled)
        # Every database connection times its statements for the request's Server-Timing.
        from django.db.backends.signals import connection_created

        from engram_site import stopwatch

        connection_created.connect(stopwatch.install_statement_timer, dispatch_uid="engram-statement-timer")
        checks.register(embedding.check_configured_model)
