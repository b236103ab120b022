from django.apps import AppConfig
from django.core import checks


class ConsoleConfig(AppConfig):
    """The operator console: custom admin pages (console/views/) served by the admin
    site of console/sites.py. The site itself is installed in place of
    ``django.contrib.admin`` (``console.sites.ConsoleAdminConfig``)."""

    name = "console"
    verbose_name = "Operator console"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        checks.register(check_failure_rates, checks.Tags.security)


def check_failure_rates(app_configs=None, **kwargs):
    """A malformed failure limit is refused at start-up, not on the first failed login."""
    from django.conf import settings

    from engram_site.throttle import parse_rate

    rates = {
        "ENGRAM_LOGIN_FAILURES_PER_ADDRESS": settings.ENGRAM_LOGIN_FAILURES_PER_ADDRESS,
        "ENGRAM_LOGIN_FAILURES_PER_USERNAME": settings.ENGRAM_LOGIN_FAILURES_PER_USERNAME,
        "ENGRAM_AUTH_FAILURE_RATE": settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["auth_failures"],
    }
    errors = []
    for name, rate in rates.items():
        try:
            parse_rate(rate)
        except ValueError as exc:
            errors.append(checks.Error(str(exc), hint=f"Set {name} to e.g. '20/15m'.", id="engram.E001"))
    return errors
