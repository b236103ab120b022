"""Celery tasks of the memories app: thin wrappers around memories.services, and the functions
that queue them.

Hints only: the database is the queue of record. If one of these is lost (broker
down, worker killed), the rows it would have filled still have NULL columns and
the enrichment sweep (maintenance.enrichment_sweep, every minute) fills them.

This module imports the write gateway (its task runs the enrichment), so the gateway cannot
import it: a write announces itself with a signal after its commit (``memories_created``,
``enrichment_retried``), and memories/receivers.py calls the functions below.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable

from celery import chain, shared_task
from django.conf import settings

from engram_site.jobs.presets import HINT, RETRYABLE
from memories import hooks
from memories.selectors import memories_tenant_ids
from memories.services.enrichment import memories_enrich_all_pending
from memories.services.keys import memory_keys_build
from memories.services.passages import memory_passages_build

logger = logging.getLogger(__name__)


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
    report = memories_enrich_all_pending(memory_ids=memory_ids, batch_size=settings.ENGRAM_ENRICH_BATCH_SIZE)
    if report.failed:
        raise EnrichmentIncomplete("; ".join(report.errors))
    return report.counts()


@shared_task(name="memories.build_keys", tenant_scope=memories_tenant_ids, **HINT)
def build_keys(memory_ids: list[str]) -> dict:
    """Build the key documents of these memories that are missing or out of date (idempotent);
    those the graph has not extracted yet wait for it (memories.services.keys)."""
    if not settings.ENGRAM_KEYS_ENABLED:
        return {}
    return memory_keys_build(memory_ids=memory_ids).counts()


@shared_task(name="memories.build_passages", tenant_scope=memories_tenant_ids, **HINT)
def build_passages(memory_ids: list[str]) -> dict:
    """Split and embed those of these memories that are longer than the model's window and whose
    passages are missing or out of date (idempotent; memories.services.passages)."""
    return memory_passages_build(memory_ids=memory_ids).counts()


def _ids(memory_ids: Iterable) -> list[str]:
    return [str(i) for i in memory_ids]


def enqueue_keys(memory_ids: Iterable) -> None:
    """Ask a worker to build these memories' key documents (the graph, once it has extracted
    them). Never raises; the enrichment sweep's key pass finds what a lost hint leaves."""
    try:
        ids = _ids(memory_ids)
        if ids and settings.ENGRAM_KEYS_ENABLED:
            hooks.publish(lambda: build_keys.si(ids), what="key documents", count=len(ids))
    except Exception:
        logger.exception("enqueue_keys failed for some memories")


def enqueue_enrichment(*, bucket_id: uuid.UUID, memory_ids: list[uuid.UUID]) -> None:
    """Queue the background work new memories need: fill any derived column that is still
    NULL, build their passages (long ones) and key documents, then the follow-up work the apps
    above registered (classify, look for near-duplicates, record links). One message per write
    (a chain). Never raises: a broker outage must not turn a committed write into an error."""
    try:
        ids = _ids(memory_ids)
        enrich = enrich_memories.si(ids)
        # Then the passages of the long ones, the keys of the memories no source waits on (with
        # the graph on, its extraction queues the build), and the follow-up work.
        keys = [build_keys.si(ids)] if settings.ENGRAM_KEYS_ENABLED else []
        work = [enrich, build_passages.si(ids), *keys, *hooks.follow_up_work(ids)]
        hooks.publish(lambda: chain(*work), what="enrichment", count=len(ids))
    except Exception:  # a signature bug must not fail a committed write either
        logger.exception("enqueue_enrichment failed for %d memories in bucket %s", len(memory_ids), bucket_id)


def enqueue_retry(*, stage: str, memory_ids: Iterable[uuid.UUID]) -> None:
    """Queue the work of ``stage`` for memories an operator retries. Never raises: the
    sweeps take them anyway, their retry time being now."""
    try:
        ids = _ids(memory_ids)
        if stage in ("embedding", "lemmas"):
            # Once embedded, the memory gets the follow-up work a new one gets.
            follow = hooks.follow_up_work(ids) if stage == "embedding" else []
            signatures = [enrich_memories.si(ids), *follow]
        else:
            signatures = hooks.retry_work(stage, ids)
        if ids and signatures:
            hooks.publish(lambda: chain(*signatures), what=f"{stage} retry", count=len(ids))
    except Exception:
        logger.exception("enqueue_retry failed for some memories")
