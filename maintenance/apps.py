from django.apps import AppConfig


class MaintenanceConfig(AppConfig):
    name = "maintenance"
    verbose_name = "Maintenance"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Imported here, not at the top: models and tasks can only load once apps are ready.
        from maintenance import receivers
        from memories import hooks

        hooks.register_follow_up(receivers.follow_up_work)
