from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from tenants import schema  # noqa: F401  (registers the OpenAPI auth extension)
