"""The ``classify`` job and hint: scope and topic labels for memories that have none."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Q

from engram_site import activity
from engram_site.jobs.runner import JobRecorder
from maintenance.classifier import Classification, ClassifyInput, get_classifier
from memories.models import EnrichmentStage, Memory
from memories.services.classification import memories_label
from memories.services.enrichment_failures import deferred, failures_clear, failures_record, isolate
from tenants.models import Bucket, Tenant


def _null_recorder() -> JobRecorder:
    return JobRecorder(None)


def _classifiable(*, force: bool) -> Q:
    if force:
        # Everything a classifier labelled before, and everything unlabelled; labels a
        # client set itself (no "classified_by") are left alone.
        return (
            Q(classified_scope__isnull=True) | Q(classified_topic__isnull=True) | Q(metadata__has_key="classified_by")
        )
    return Q(classified_scope__isnull=True) | Q(classified_topic__isnull=True)


def classification_disabled_tenants():
    """Tenants whose memories are not classified: the per-tenant flag is off
    (seed 000: classification costs money on long-tail tenants), or the tenant is inactive."""
    return Tenant.objects.filter(Q(settings__classification_enabled=False) | Q(is_active=False)).values("pk")


def memories_classify(
    *,
    recorder: JobRecorder | None = None,
    memory_ids: Iterable | None = None,
    bucket: Bucket | None = None,
    force: bool = False,
    batch_size: int = 64,
    classifier=None,
    limit: int | None = None,
) -> dict:
    """Set ``classified_scope`` and ``classified_topic`` where they are missing.

    Only rows with an embedding are classified (the local classifier compares it
    with its prototypes; rows without one are picked up once the enrichment
    sweep has filled it). Labels a client set are kept: a NULL column is filled,
    a set one is not overwritten (``force`` relabels what a classifier labelled).
    The classifier's name goes into ``metadata.classified_by``. ``limit``: stop after that
    many rows (a step of the bucket's classification stage; ``scanned`` says how many were seen).
    """
    recorder = recorder or _null_recorder()
    classifier = classifier or get_classifier()
    queryset = (
        Memory.objects.filter(_classifiable(force=force), embedding__isnull=False)
        .exclude(tenant_id__in=classification_disabled_tenants())
        .order_by("id")
    )
    if bucket is not None:
        queryset = queryset.for_bucket(bucket)
    if memory_ids is not None:
        queryset = queryset.filter(pk__in=list(memory_ids))
    else:
        # The sweep leaves a row the classifier failed on until its retry time.
        queryset = queryset.filter(~deferred(EnrichmentStage.CLASSIFICATION))
    if limit is None:
        recorder.set_total(queryset.count())
    counts = {"classified": 0, "general": 0, "specific": 0, "failures_recorded": 0, "scanned": 0}
    last_id = None
    while limit is None or counts["scanned"] < limit:
        activity.pause()
        page = queryset if last_id is None else queryset.filter(pk__gt=last_id)
        size = batch_size if limit is None else min(batch_size, limit - counts["scanned"])
        rows = list(page.values_list("id", "content", "embedding", "embedding_model")[:size])
        if not rows:
            break
        last_id = rows[-1][0]
        items = [
            _Classified(id=i, input=ClassifyInput(content=content, embedding=vector, model=model))
            for i, content, vector, model in rows
        ]
        # A row the classifier fails on is found (the batch is halved) and recorded; the rest
        # of the batch is labelled.
        found = isolate(items, lambda batch: _classify(classifier, batch), key=lambda item: item.id)
        done = [item for item in items if item.id not in found.errors]
        counts["classified"] += memories_label(
            ids=[item.id for item in done],
            scopes=[item.result.scope for item in done],
            topics=[item.result.topic for item in done],
            by=[item.result.by for item in done],
            force=force,
        )
        failures_clear(stage=EnrichmentStage.CLASSIFICATION, memory_ids=[item.id for item in done])
        failures_record(stage=EnrichmentStage.CLASSIFICATION, errors=found.errors)
        counts["failures_recorded"] += len(found.errors)
        for item in done:
            counts[item.result.scope] += 1
        counts["scanned"] += len(rows)
        recorder.advance(len(rows))
    failures = getattr(classifier, "failures", 0)
    if failures:
        counts["llm_fallbacks"] = failures
    counts["classifier"] = classifier.name
    recorder.set(**counts)
    return counts


@dataclass
class _Classified:
    id: uuid.UUID
    input: ClassifyInput
    result: Classification | None = None


def _classify(classifier, items: list[_Classified]) -> dict:
    results = classifier.classify([item.input for item in items])
    if len(results) != len(items):
        raise ValueError(f"the classifier answered {len(results)} labels for {len(items)} memories")
    for item, result in zip(items, results, strict=True):
        item.result = result
    return {}
