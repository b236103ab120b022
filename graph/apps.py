from django.apps import AppConfig


class GraphConfig(AppConfig):
    name = "graph"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from engram_site import metrics, tracing
        from graph import keys, receivers  # noqa: F401  (receivers: connects to memories.signals)
        from graph.participants import GraphParticipant
        from graph.retrieval import graph_signal
        from graph.tasks import retry_work
        from memories import hooks, participants
        from memories.keys import KeySource, register_key_source
        from memories.models import EnrichmentStage
        from memories.retrieval import register_graph_signal

        timed = metrics.timed(metrics.SIGNAL_SECONDS, signal="graph")
        register_graph_signal(timed(tracing.traced("engram.search.signal", signal="graph")(graph_signal)))
        hooks.register_retry(EnrichmentStage.GRAPH, retry_work)
        participants.register(GraphParticipant())
        register_key_source(KeySource("graph", facts=keys.key_facts, waiting=keys.waiting))
