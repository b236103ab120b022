"""Celery tasks of the graph app: thin wrappers around graph.services.extraction.

Extraction is asked for after a write commits (a hint, one run per bucket at a time however
many writes ask: ``graph.extract_bucket``; an edit's memory is extracted by itself,
``graph.extract_memories``); the ``graph.extract_pending``
sweep (beat, every two minutes) extracts whatever a lost hint left behind, since
``graph_processed`` records what the extractor has seen.
"""

from __future__ import annotations

import logging

from celery import shared_task

from engram_site.jobs import coalesce, runner
from engram_site.jobs.presets import HINT, SCHEDULED
from engram_site.scoping import scopes_disabled
from graph.services import extraction
from graph.services.reports import GraphReport
from memories import hooks
from memories.selectors import memories_tenant_ids
from memories.tasks import enqueue_keys, request_keys
from tenants.models import Bucket
from tenants.selectors import bucket_tenant_ids

logger = logging.getLogger(__name__)


def _as_counts(report: GraphReport) -> dict:
    return {
        "memories": report.memories,
        "edges": report.edges,
        "entities": report.entities,
        "superseded": report.superseded,
        "errors": len(report.errors),
    }


@shared_task(name="graph.extract_memories", tenant_scope=memories_tenant_ids, **HINT)
def extract_memories(memory_ids: list[str]) -> dict:
    counts = _as_counts(extraction.graph_extract_memories(memory_ids=memory_ids))
    # Their key documents waited for the graph (graph/keys.py): built now, with its facts.
    enqueue_keys(memory_ids)
    return counts


def _extract_pending(*, recorder: runner.JobRecorder, limit: int = 1000) -> None:
    while True:
        report = extraction.graph_extract_pending(limit=limit)
        if report.skipped:
            recorder.set(skipped=report.skipped)
            return
        if not report.memories and not report.errors:
            return
        # A memory the extractor fails on has a failure record (enrichment_failures) and waits
        # for its retry time; the run goes on with the others.
        recorder.add(
            memories=report.memories,
            edges=report.edges,
            superseded=report.superseded,
            failures_recorded=report.failures_recorded,
        )


@shared_task(name="graph.extract_pending", **SCHEDULED)
@scopes_disabled()  # cross-tenant: extracts the new memories of every bucket
def extract_pending() -> dict:
    return runner.run_job("graph_extract_pending", _extract_pending, lock=True, keep_idle=False).as_dict()


@shared_task(name="graph.rebuild_bucket", tenant_scope=bucket_tenant_ids, **SCHEDULED)
def rebuild_bucket(bucket_id: str) -> dict:
    def run(*, recorder: runner.JobRecorder) -> None:
        bucket = Bucket.objects.select_related("tenant").get(pk=bucket_id)
        report = extraction.graph_rebuild(bucket=bucket)
        recorder.add(**{k: v for k, v in _as_counts(report).items() if k != "errors"})
        if report.errors:
            recorder.fail("; ".join(report.errors[:5]))

    return runner.run_job("graph_rebuild", run, lock=False).as_dict()


# Memories a run of the graph stage extracts per step (one transaction per activity.TURN of them).
GRAPH_PER_STEP = 100


def _extract_step(bucket: Bucket) -> tuple[dict, bool]:
    report = extraction.graph_extract_pending(limit=GRAPH_PER_STEP, bucket=bucket)
    if report.skipped:
        return {"skipped": report.skipped}, False
    if report.memories:
        # Their key documents waited for the graph (graph/keys.py): built now, with its facts.
        request_keys(bucket.pk)
    return _as_counts(report), report.selected == GRAPH_PER_STEP


@shared_task(name="graph.extract_bucket", tenant_scope=bucket_tenant_ids, **HINT)
def extract_bucket(bucket_id: str) -> dict:
    """The bucket's memories the graph has not seen yet (idempotent; graph_processed is the work
    list), a bounded batch per step (engram_site/jobs/coalesce.py)."""
    bucket = Bucket.objects.filter(pk=bucket_id).select_related("tenant").first()
    if bucket is None:
        return {"skipped": "no such bucket"}
    return coalesce.run(
        "graph", bucket_id, step=lambda: _extract_step(bucket), publish=lambda: _publish_bucket(bucket_id)
    )


def _publish_bucket(bucket_id) -> bool:
    return hooks.publish(lambda: extract_bucket.si(str(bucket_id)), what="graph extraction", count=1)


def request_extraction(bucket_id) -> None:
    """Ask for a run of the graph stage on this bucket (new memories were written). Never
    raises; the graph.extract_pending sweep finds what a lost hint leaves."""
    coalesce.request("graph", bucket_id, lambda: _publish_bucket(bucket_id))


def retry_work(memory_ids: list[str]) -> list:
    """What an operator's retry of the graph stage queues (memories.hooks.register_retry)."""
    return [extract_memories.si(memory_ids)]


def enqueue_extraction(memory_ids) -> None:
    """Ask a worker to extract these memories. Never raises and never waits long on a
    broker that is down (memories.hooks backs off); the sweep finds them later."""
    ids = [str(i) for i in memory_ids]
    hooks.publish(lambda: extract_memories.si(ids), what="graph extraction", count=len(ids))
