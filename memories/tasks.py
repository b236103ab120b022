"""Celery tasks of the memories app: thin wrappers around memories.services.

Hints only: the database is the queue of record. If one of these is lost (broker
down, worker killed), the rows it would have filled still have NULL columns and
the enrichment sweep (maintenance.enrichment_sweep, every minute) fills them.
"""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from engram_site.jobs.presets import HINT, RETRYABLE
from memories import services
from memories.selectors import memories_tenant_ids


class EnrichmentIncomplete(RuntimeError):
    """Some rows could not be enriched (model or lemmatizer unavailable): retry later."""


# A hint, retried also when a model was down for some rows.
@shared_task(
    name="memories.enrich_memories",
    tenant_scope=memories_tenant_ids,
    **{**HINT, "autoretry_for": (EnrichmentIncomplete, *RETRYABLE)},
)
def enrich_memories(memory_ids: list[str]) -> dict:
    """Fill the derived columns of these memories (those still missing; idempotent)."""
    report = services.memories_enrich_all_pending(memory_ids=memory_ids, batch_size=settings.ENGRAM_ENRICH_BATCH_SIZE)
    if report.failed:
        raise EnrichmentIncomplete("; ".join(report.errors))
    return report.counts()
