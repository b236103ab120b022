from django.apps import AppConfig


class SourcesConfig(AppConfig):
    name = "sources"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Imported here, not at the top: models can only load once apps are ready.
        from memories import participants, provenance
        from memories.keys import KeySource, register_key_source
        from sources import keys, receivers, selectors  # noqa: F401  (receivers: connects to sources.signals)
        from sources.participants import SourcesParticipant

        provenance.register_source_lookup(selectors.memory_source)
        participants.register(SourcesParticipant())
        register_key_source(KeySource("sources", facts=keys.key_facts))
