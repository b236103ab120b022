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

from engram_site.jobs import coalesce
from engram_site.jobs.presets import HINT, RETRYABLE
from memories import hooks
from memories.selectors import memories_tenant_ids
from memories.services.enrichment import memories_enrich_all_pending, memories_enrich_pending
from memories.services.keys import memory_keys_build
from memories.services.passages import memory_passages_build
from tenants.models import Bucket
from tenants.selectors import bucket_tenant_ids

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
    if report.embedded_ids:
        hooks.after_enrichment(memory_ids=report.embedded_ids)
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


# --- follow-up work per bucket (engram_site/jobs/coalesce.py): one run per stage and bucket


def _bucket(bucket_id: str) -> Bucket | None:
    return Bucket.objects.filter(pk=bucket_id).select_related("tenant").first()


def _enrich_step(bucket: Bucket) -> tuple[dict, bool]:
    """One batch of the bucket's missing derived columns, then one of its long memories'
    passages; the rows that got their embedding are handed to the follow-up stages."""
    size = settings.ENGRAM_ENRICH_BATCH_SIZE
    report = memories_enrich_pending(batch_size=size, bucket=bucket)
    if report.embedded_ids:
        hooks.after_enrichment(memory_ids=report.embedded_ids)
    passages = memory_passages_build(bucket=bucket, limit=PASSAGES_PER_STEP)
    more = (report.scanned == size and report.failed < report.scanned) or (
        passages.scanned == PASSAGES_PER_STEP and passages.failed < passages.scanned
    )
    if report.failed or passages.failed:
        logger.warning("enrichment of bucket %s left rows: %s", bucket.pk, "; ".join(report.errors + passages.errors))
    counts = {**report.counts(), **{f"passages_{k}": v for k, v in passages.counts().items()}}
    return counts, more


# Long memories a run of the enrichment stage splits and embeds per step (each is a few model calls).
PASSAGES_PER_STEP = 32


@shared_task(name="memories.enrich_bucket", tenant_scope=bucket_tenant_ids, **HINT)
def enrich_bucket(bucket_id: str) -> dict:
    """The bucket's memories still missing a derived column (embedding, lemmas, context), then
    the passages of its long ones (idempotent; the rows missing them are the work list)."""
    bucket = _bucket(bucket_id)
    if bucket is None:
        return {"skipped": "no such bucket"}
    return coalesce.run(
        "enrich", bucket_id, step=lambda: _enrich_step(bucket), publish=lambda: _publish_enrich(bucket_id)
    )


def _keys_step(bucket: Bucket) -> tuple[dict, bool]:
    report = memory_keys_build(bucket=bucket, limit=KEYS_PER_STEP)
    # More only if this step built some (the rest may all be waiting for the graph, which asks
    # for another run when it has extracted them).
    more = report.scanned == KEYS_PER_STEP and report.built > 0
    return report.counts(), more


# Memories a run of the key stage visits per step (memories.services.keys builds them 128 at a time).
KEYS_PER_STEP = 256


@shared_task(name="memories.build_keys_bucket", tenant_scope=bucket_tenant_ids, **HINT)
def build_keys_bucket(bucket_id: str) -> dict:
    """The bucket's key documents that are missing or out of date, but those the graph has not
    extracted yet (it asks for this stage again once it has; memories.services.keys)."""
    if not settings.ENGRAM_KEYS_ENABLED:
        return {}
    bucket = _bucket(bucket_id)
    if bucket is None:
        return {"skipped": "no such bucket"}
    return coalesce.run("keys", bucket_id, step=lambda: _keys_step(bucket), publish=lambda: _publish_keys(bucket_id))


def _publish_enrich(bucket_id) -> bool:
    return hooks.publish(lambda: enrich_bucket.si(str(bucket_id)), what="enrichment", count=1)


def _publish_keys(bucket_id) -> bool:
    return hooks.publish(lambda: build_keys_bucket.si(str(bucket_id)), what="key documents", count=1)


def request_keys(bucket_id) -> None:
    """Ask for a run of the key stage on this bucket (the graph, once it has extracted some of
    its memories). Never raises; the enrichment sweep's key pass finds what a lost hint leaves."""
    if settings.ENGRAM_KEYS_ENABLED:
        coalesce.request("keys", bucket_id, lambda: _publish_keys(bucket_id))


def enqueue_keys(memory_ids: Iterable) -> None:
    """Ask a worker to build these memories' key documents (an edit's, one memory). Never
    raises; the enrichment sweep's key pass finds what a lost hint leaves."""
    try:
        ids = _ids(memory_ids)
        if ids and settings.ENGRAM_KEYS_ENABLED:
            hooks.publish(lambda: build_keys.si(ids), what="key documents", count=len(ids))
    except Exception:
        logger.exception("enqueue_keys failed for some memories")


def enqueue_enrichment(*, bucket_id: uuid.UUID, memory_ids: list[uuid.UUID]) -> None:
    """Ask for the background work new memories need, per bucket and stage, not per write
    (engram_site/jobs/coalesce.py): the columns still NULL and the passages of long ones, the key
    documents (those the graph has not extracted wait for it), and the follow-up work the apps
    above registered (classification, the near-duplicate, contradiction and link checks). At most
    one message per stage and bucket waits in the queue, however many writes ask. Never raises:
    a broker outage must not turn a committed write into an error."""
    try:
        coalesce.request("enrich", bucket_id, lambda: _publish_enrich(bucket_id))
        request_keys(bucket_id)
        hooks.follow_up(bucket_id=bucket_id, memory_ids=memory_ids)
    except Exception:  # a signature bug must not fail a committed write either
        logger.exception("enqueue_enrichment failed for %d memories in bucket %s", len(memory_ids), bucket_id)


def enqueue_retry(*, stage: str, memory_ids: Iterable[uuid.UUID]) -> None:
    """Queue the work of ``stage`` for memories an operator retries. Never raises: the
    sweeps take them anyway, their retry time being now."""
    try:
        ids = _ids(memory_ids)
        # Once embedded, a memory gets the follow-up work a new one gets (the task hands the rows
        # it embeds to memories.hooks.after_enrichment).
        embedding = stage in ("embedding", "lemmas")
        signatures = [enrich_memories.si(ids)] if embedding else hooks.retry_work(stage, ids)
        if ids and signatures:
            hooks.publish(lambda: chain(*signatures), what=f"{stage} retry", count=len(ids))
    except Exception:
        logger.exception("enqueue_retry failed for some memories")
