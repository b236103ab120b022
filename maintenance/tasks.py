"""Celery tasks of the maintenance jobs: each body is one service call.

Names are explicit and stable: django-celery-beat's schedules and queued
messages refer to tasks by name. Tasks take ids, never objects, and are
idempotent; their options are the platform's presets (engram_site/jobs/presets.py).
"""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.conf import settings

from engram_site.jobs import coalesce, runner
from engram_site.jobs.presets import HINT, SCHEDULED
from engram_site.locks import LockHeld
from engram_site.scoping import scopes_disabled
from maintenance.services import (
    classification,
    comparisons,
    conflicts,
    duplicates,
    embedding_switch,
    enrichment,
    feed,
    links,
    reindex,
)
from memories import hooks
from memories.selectors import memories_tenant_ids
from memories.services import ranking_learning
from memories.services.access import apply_pending
from memories.services.lifecycle import memories_purge
from tenants.models import Bucket
from tenants.selectors import bucket_tenant_ids

# --- hints: follow-up work for new memories (memories.tasks.enqueue_enrichment, hooks.after_enrichment)


@shared_task(name="maintenance.classify_memories", tenant_scope=memories_tenant_ids, **HINT)
def classify_memories(memory_ids: list[str]) -> dict:
    return classification.memories_classify(memory_ids=memory_ids)


@shared_task(name="maintenance.find_duplicates", tenant_scope=memories_tenant_ids, **HINT)
def find_duplicates(memory_ids: list[str]) -> dict:
    return duplicates.near_duplicates_find_for(memory_ids=memory_ids)


@shared_task(name="maintenance.find_conflicts", tenant_scope=memories_tenant_ids, **HINT)
def find_conflicts(memory_ids: list[str]) -> dict:
    return conflicts.conflicts_find_for(memory_ids=memory_ids)


@shared_task(name="maintenance.link_new_memories", tenant_scope=memories_tenant_ids, **HINT)
def link_new_memories(memory_ids: list[str]) -> dict:
    return links.links_find_for(memory_ids=memory_ids)


# --- follow-up work per bucket (engram_site/jobs/coalesce.py): one run per stage and bucket

# Memories a step of the classification stage labels (the classifier takes them 64 at a time).
CLASSIFY_PER_STEP = 256
# Memories a step of the compare stage checks (three nearest-neighbour queries each).
COMPARE_PER_STEP = 100


def _bucket(bucket_id: str) -> Bucket | None:
    return Bucket.objects.filter(pk=bucket_id).select_related("tenant").first()


def _classify_step(bucket: Bucket) -> tuple[dict, bool]:
    counts = classification.memories_classify(bucket=bucket, limit=CLASSIFY_PER_STEP)
    return counts, counts["scanned"] == CLASSIFY_PER_STEP


@shared_task(name="maintenance.classify_bucket", tenant_scope=bucket_tenant_ids, **HINT)
def classify_bucket(bucket_id: str) -> dict:
    """Label the bucket's memories that have an embedding and no label (idempotent: a NULL label
    is the work list), a bounded batch per step. Needs nothing but the embedding."""
    bucket = _bucket(bucket_id)
    if bucket is None:
        return {"skipped": "no such bucket"}
    return coalesce.run(
        "classify", bucket_id, step=lambda: _classify_step(bucket), publish=lambda: _publish_classify(bucket_id)
    )


@shared_task(name="maintenance.compare_bucket", tenant_scope=bucket_tenant_ids, **HINT)
def compare_bucket(bucket_id: str) -> dict:
    """The near-duplicate, contradiction and link checks of the bucket's new memories
    (maintenance.services.comparisons: the list of those waiting is the work list)."""
    bucket = _bucket(bucket_id)
    if bucket is None:
        return {"skipped": "no such bucket"}
    return coalesce.run(
        "compare",
        bucket_id,
        step=lambda: comparisons.comparisons_step(bucket=bucket, limit=COMPARE_PER_STEP),
        publish=lambda: _publish_compare(bucket_id),
    )


def _publish_classify(bucket_id) -> bool:
    return hooks.publish(lambda: classify_bucket.si(str(bucket_id)), what="classification", count=1)


def _publish_compare(bucket_id) -> bool:
    return hooks.publish(lambda: compare_bucket.si(str(bucket_id)), what="comparisons", count=1)


def request_classification(bucket_id) -> None:
    coalesce.request("classify", bucket_id, lambda: _publish_classify(bucket_id))


def request_comparisons(bucket_id) -> None:
    coalesce.request("compare", bucket_id, lambda: _publish_compare(bucket_id))


# --- scheduled jobs (maintenance/schedules.py), recorded as JobRuns -------------------------------


@shared_task(name="maintenance.enrichment_sweep", **SCHEDULED)
@scopes_disabled()  # cross-tenant: fills the missing columns of every bucket
def enrichment_sweep() -> dict:
    # Every minute: runs that found nothing to do are not kept.
    result = runner.run_job("enrichment_sweep", enrichment.enrichment_sweep, keep_idle=False).as_dict()
    # Memories left on the list of the per-write checks (their message was lost): a new run.
    for bucket_id in comparisons.comparisons_waiting_buckets():
        request_comparisons(bucket_id)
    return result


@shared_task(name="maintenance.embed_missing", **SCHEDULED)
@scopes_disabled()  # cross-tenant: embeds the rows of every bucket
def embed_missing() -> dict:
    return runner.run_job("embed_missing", enrichment.missing_fill, kind="embeddings").as_dict()


@shared_task(name="maintenance.lemmatize_missing", **SCHEDULED)
@scopes_disabled()  # cross-tenant: lemmatizes the rows of every bucket
def lemmatize_missing() -> dict:
    return runner.run_job("lemmatize_missing", enrichment.missing_fill, kind="lemmas").as_dict()


@shared_task(name="maintenance.classify", **SCHEDULED)
@scopes_disabled()  # cross-tenant: classifies the rows of every bucket
def classify() -> dict:
    return runner.run_job("classify", classification.memories_classify, lock=True, keep_idle=False).as_dict()


@shared_task(name="maintenance.scan_near_duplicates", **SCHEDULED)
@scopes_disabled()  # cross-tenant: scans every bucket
def scan_near_duplicates() -> dict:
    return runner.run_job("scan_near_duplicates", duplicates.near_duplicates_scan, lock=True, keep_idle=False).as_dict()


@shared_task(name="maintenance.scan_conflicts", **SCHEDULED)
@scopes_disabled()  # cross-tenant: scans every bucket
def scan_conflicts() -> dict:
    return runner.run_job("scan_conflicts", conflicts.conflicts_scan, lock=True, keep_idle=False).as_dict()


@shared_task(name="maintenance.link_memories", **SCHEDULED)
@scopes_disabled()  # cross-tenant: links within every bucket
def link_memories() -> dict:
    return runner.run_job("link_memories", links.links_pass, lock=True, keep_idle=False).as_dict()


@shared_task(name="maintenance.switch_embedding_model", tenant_scope=bucket_tenant_ids, **HINT)
def switch_embedding_model(bucket_id: str) -> dict:
    # A worker lost mid-run hands the task to another (acks_late), which goes on from the
    # staged rows; a run that finds another one at work is skipped.
    bucket = Bucket.objects.filter(pk=bucket_id).first()
    if bucket is None:
        return {"job": "switch_embedding_model", "status": "skipped", "error": "no such bucket"}
    try:
        return runner.run_job("switch_embedding_model", embedding_switch.embedding_switch, bucket=bucket).as_dict()
    except LockHeld as exc:
        return {"job": "switch_embedding_model", "status": "skipped", "error": str(exc)}


@shared_task(name="maintenance.reindex_hnsw", **SCHEDULED)
@scopes_disabled()  # cross-tenant: rebuilds the indexes over every tenant's rows
def reindex_hnsw() -> dict:
    return runner.run_job("reindex_hnsw", reindex.hnsw_reindex, lock=True).as_dict()


@shared_task(name="maintenance.apply_access_times", **SCHEDULED)
@scopes_disabled()  # cross-tenant: applies the access times of every tenant
def apply_access_times() -> dict:
    return runner.run_job("apply_access_times", apply_pending, keep_idle=False).as_dict()


@shared_task(name="maintenance.purge_memories", **SCHEDULED)
@scopes_disabled()  # cross-tenant: purges what every bucket's retention let go
def purge_memories() -> dict:
    return runner.run_job("purge_memories", memories_purge, lock=True).as_dict()


@shared_task(name="maintenance.memory_events", **SCHEDULED)
@scopes_disabled()  # cross-tenant: trims every bucket's change feed
def memory_events() -> dict:
    return runner.run_job("memory_events", feed.memory_events_maintain, lock=True, keep_idle=False).as_dict()


@shared_task(name="maintenance.learn_ranking", **SCHEDULED)
@scopes_disabled()  # cross-tenant: learns each bucket's ranking, from its own ratings only
def learn_ranking() -> dict:
    return runner.run_job("learn_ranking", ranking_learning.ranking_learn_all, lock=True, keep_idle=False).as_dict()


@shared_task(name="maintenance.prune_job_runs", **SCHEDULED)
def prune_job_runs() -> int:
    return runner.job_runs_prune(older_than=timedelta(days=settings.ENGRAM_JOB_RETENTION_DAYS))
