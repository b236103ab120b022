"""How sources follow their own writes after a commit (connected in SourcesConfig.ready)."""

from __future__ import annotations

from django.dispatch import receiver

from sources import signals
from sources.tasks import enqueue_processing


@receiver(signals.source_pending)
def queue_processing(sender, *, source_id, **kwargs):
    enqueue_processing(source_id)
