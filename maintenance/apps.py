from django.apps import AppConfig


class MaintenanceConfig(AppConfig):
    name = "maintenance"
    verbose_name = "Maintenance"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Imported here, not at the top: models and tasks can only load once apps are ready.
        from maintenance import receivers
        from maintenance.participants import MaintenanceParticipant
        from memories import hooks, participants
        from memories.models import EnrichmentStage

        hooks.register_follow_up(receivers.follow_up)
        hooks.register_retry(EnrichmentStage.CLASSIFICATION, receivers.retry_classification)
        participants.register(MaintenanceParticipant())
