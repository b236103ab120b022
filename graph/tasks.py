"""Celery tasks of the graph app: thin wrappers around graph.services."""

from __future__ import annotations

import logging

from celery import shared_task

from graph import services

logger = logging.getLogger(__name__)


@shared_task(acks_late=True, autoretry_for=(Exception,), retry_backoff=True, max_retries=3)
def extract_memories(memory_ids: list[str]) -> dict:
    report = services.graph_extract_memories(memory_ids=memory_ids)
    return {"memories": report.memories, "edges": report.edges, "superseded": report.superseded}


@shared_task(acks_late=True, autoretry_for=(Exception,), retry_backoff=True, max_retries=3)
def extract_pending(limit: int = 1000) -> dict:
    report = services.graph_extract_pending(limit=limit)
    return {"memories": report.memories, "edges": report.edges, "superseded": report.superseded}


@shared_task(acks_late=True, autoretry_for=(Exception,), retry_backoff=True, max_retries=2)
def rebuild_bucket(bucket_id: str) -> dict:
    from tenants.models import Bucket

    bucket = Bucket.objects.select_related("tenant").get(pk=bucket_id)
    report = services.graph_rebuild(bucket=bucket)
    return {"memories": report.memories, "edges": report.edges, "entities": report.entities}


def enqueue_extraction(memory_ids) -> None:
    """Ask a worker to extract these memories. Never raises: if the broker is down the
    extract_pending sweep finds them later (graph_processed has no row for them)."""
    try:
        extract_memories.delay([str(i) for i in memory_ids])
    except Exception:
        logger.warning("could not queue graph extraction for %d memories; the sweep will", len(memory_ids))
