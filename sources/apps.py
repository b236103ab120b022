from django.apps import AppConfig


class SourcesConfig(AppConfig):
    name = "sources"
    default_auto_field = "django.db.models.BigAutoField"
