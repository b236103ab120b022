"""The enrichment jobs: the every-minute sweep (derived columns, then passages of long memories
and key documents), ``embed_missing`` / ``lemmatize_missing``, ``build_passages`` and ``build_keys``."""

from __future__ import annotations

from django.conf import settings

from engram_site.jobs.runner import JobRecorder
from memories import hooks
from memories.services.enrichment import (
    ENRICHMENT_KINDS,
    EnrichmentReport,
    memories_enrich_all_pending,
    pending_enrichment_count,
)
from memories.services.feedback import feedback_vectors_fill
from memories.services.keys import KeysReport, keys_pending_count, memory_keys_build
from memories.services.passages import PassagesReport, memory_passages_build, passages_pending_count
from tenants.models import Bucket


def enrichment_sweep(*, recorder: JobRecorder, batch_size: int | None = None) -> EnrichmentReport:
    """Fill every missing derived column (the every-minute sweep).

    This is what makes the broker optional: a write whose hint was lost (broker
    down, worker killed) still has NULL columns, and this finds it through the
    partial index idx_memories_enrich_pending. Rows that get their embedding are
    handed on to classification, the near-duplicate scan and the link pass.
    """
    recorder.set_total(pending_enrichment_count())

    def on_batch(report: EnrichmentReport) -> None:
        recorder.advance(report.scanned)
        if report.embedded_ids:
            hooks.after_enrichment(memory_ids=report.embedded_ids)

    report = memories_enrich_all_pending(batch_size=batch_size or settings.ENGRAM_ENRICH_BATCH_SIZE, on_batch=on_batch)
    recorder.add(**report.counts())
    errors = list(report.errors)
    # The passages of long memories a lost hint or a model outage left unbuilt, or that went out
    # of date (at most PASSAGE_SWEEP_LIMIT memories a minute: a backfill is build_passages' job).
    built = memory_passages_build(limit=PASSAGE_SWEEP_LIMIT)
    recorder.add(**{f"passages_{name}": value for name, value in built.counts().items()})
    errors += built.errors
    if settings.ENGRAM_KEYS_ENABLED:
        # Then the key documents a lost hint left unbuilt, or that went out of date (at most
        # KEY_SWEEP_LIMIT a minute: a backfill is build_keys' job).
        keys = memory_keys_build(limit=KEY_SWEEP_LIMIT)
        recorder.add(**{f"keys_{name}": value for name, value in keys.counts().items()})
        errors += keys.errors
    if errors:
        recorder.fail("; ".join(errors))
    return report


# Memories the sweep's key pass visits per run.
KEY_SWEEP_LIMIT = 2_000
# Long memories the sweep's passage pass visits per run (each is a few model calls' worth).
PASSAGE_SWEEP_LIMIT = 500


def passages_build(*, recorder: JobRecorder, bucket: Bucket | None = None) -> PassagesReport:
    """``build_passages``: split and embed every long memory whose passages are missing or out of
    date (the backfill of memories written before passages existed, and after a new splitter).
    Batched, each batch committed, resumable (the out-of-date condition is the cursor)."""
    recorder.set_total(passages_pending_count(bucket=bucket))
    report = memory_passages_build(bucket=bucket, on_batch=lambda r: recorder.advance(r.scanned))
    recorder.add(**report.counts())
    if report.failed:
        recorder.fail("; ".join(report.errors))
    return report


def keys_build(*, recorder: JobRecorder, bucket: Bucket | None = None, wait: bool = True) -> KeysReport:
    """``build_keys``: build every key document that is missing or out of date (the backfill of
    memories written before keys existed, and after a new recipe). Batched, each batch
    committed, resumable (the out-of-date condition is the cursor). ``wait``: leave the memories
    the graph has not extracted yet (it queues their build when it has)."""
    recorder.set_total(keys_pending_count(bucket=bucket))
    report = memory_keys_build(bucket=bucket, wait=wait, on_batch=lambda r: recorder.advance(r.scanned))
    recorder.add(**report.counts())
    if report.failed:
        recorder.fail("; ".join(report.errors))
    return report


def missing_fill(
    *, recorder: JobRecorder, kind: str, bucket: Bucket | None = None, batch_size: int | None = None
) -> EnrichmentReport:
    """``embed_missing`` (kind="embeddings") and ``lemmatize_missing`` (kind="lemmas").

    Batched (one transaction per batch), resumable (the NULL columns are the
    cursor: a run that stops leaves the rest for the next) and safe to run
    concurrently (rows are claimed with FOR UPDATE SKIP LOCKED).
    """
    if kind not in ENRICHMENT_KINDS:
        raise ValueError(f"unknown kind {kind!r}")
    recorder.set_total(pending_enrichment_count(bucket=bucket, kind=kind))
    report = memories_enrich_all_pending(
        batch_size=batch_size or settings.ENGRAM_ENRICH_BATCH_SIZE,
        bucket=bucket,
        kind=kind,
        on_batch=lambda r: recorder.advance(r.scanned),
    )
    recorder.add(**report.counts())
    if kind == "embeddings" and bucket is None:
        # Ratings stored while the model was down: their query's vector, so they count again.
        recorder.add(ratings_embedded=feedback_vectors_fill())
    if report.failed:
        recorder.fail("; ".join(report.errors))
    return report
