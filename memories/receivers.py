"""How the memories app follows its own writes after a commit (connected in MemoriesConfig.ready,
before the apps above connect theirs): the write gateway announces a change with a signal, and
these receivers queue the memories app's task, which the gateway cannot import (memories.tasks
imports it)."""

from __future__ import annotations

from django.dispatch import receiver

from memories import signals
from memories.tasks import enqueue_enrichment, enqueue_retry


@receiver(signals.memories_created)
def enrich_new_memories(sender, *, bucket_id, memory_ids, restored=False, **kwargs):
    # A restored memory comes back with the columns it had (the sweep fills any it lacked):
    # it is not enriched again, and gets none of the follow-up work of a new one.
    if not restored:
        enqueue_enrichment(bucket_id=bucket_id, memory_ids=memory_ids)


@receiver(signals.enrichment_retried)
def queue_retried_stage(sender, *, stage, memory_ids, **kwargs):
    enqueue_retry(stage=stage, memory_ids=memory_ids)
