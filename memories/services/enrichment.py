"""The enrichment sweep: derived columns (lemmas, embeddings) a write could not compute.

A write stores its row even when the model or the lemmatizer is down, leaving the derived
column NULL; this sweep fills those rows in (``idx_memories_enrich_pending``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import Q

from memories.models import PENDING_ENRICHMENT, Memory
from memories.services.events import note_writes
from memories.services.ingest import MemoryInput, Row, bucket_models_held, embed_rows, lemmatize_rows
from tenants.models import Bucket

logger = logging.getLogger(__name__)

# What a sweep fills: everything, or only one kind of derived column (a backfill after
# a model change re-embeds without re-lemmatizing, and the other way round). Each
# predicate is ANDed with PENDING_ENRICHMENT so the partial index
# idx_memories_enrich_pending always serves it.
_EMBEDDINGS_MISSING = Q(embedding__isnull=True) | Q(context_text__isnull=False, context_embedding__isnull=True)
_LEMMAS_MISSING = Q(text_lemmatized__isnull=True) | Q(context_text__isnull=False, context_lemmatized__isnull=True)
ENRICHMENT_KINDS = {
    "all": PENDING_ENRICHMENT,
    "embeddings": PENDING_ENRICHMENT & _EMBEDDINGS_MISSING,
    "lemmas": PENDING_ENRICHMENT & _LEMMAS_MISSING,
}


@dataclass
class EnrichmentReport:
    scanned: int = 0
    embedded: int = 0
    lemmatized: int = 0
    context_embedded: int = 0
    context_lemmatized: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    # Rows that got their embedding in this sweep (classification, near-duplicate
    # scans and links need it and can follow).
    embedded_ids: list[uuid.UUID] = field(default_factory=list)

    COUNTERS = ("scanned", "embedded", "lemmatized", "context_embedded", "context_lemmatized", "failed")

    def add(self, other: EnrichmentReport) -> None:
        for name in self.COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.errors += other.errors
        self.embedded_ids += other.embedded_ids

    def counts(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.COUNTERS}


def _pending(*, kind: str, bucket: Bucket | None, memory_ids: Iterable | None):
    if kind not in ENRICHMENT_KINDS:
        raise ValueError(f"unknown enrichment kind {kind!r}; expected one of {sorted(ENRICHMENT_KINDS)}")
    queryset = Memory.objects.filter(ENRICHMENT_KINDS[kind])
    if bucket is not None:
        queryset = queryset.for_bucket(bucket)
    if memory_ids is not None:
        queryset = queryset.filter(pk__in=list(memory_ids))
    return queryset


def pending_enrichment_count(*, bucket: Bucket | None = None, kind: str = "all") -> int:
    return _pending(kind=kind, bucket=bucket, memory_ids=None).count()


def memories_enrich_pending(
    *,
    batch_size: int = 256,
    bucket: Bucket | None = None,
    kind: str = "all",
    memory_ids: Iterable | None = None,
) -> EnrichmentReport:
    """Fill NULL embeddings, lemmas and context vectors for one batch of rows.

    ``kind`` limits the work to ``"embeddings"`` or ``"lemmas"``; ``memory_ids``
    to those rows (rows that need nothing are skipped). Rows are claimed with
    ``FOR UPDATE SKIP LOCKED``, so several sweeps can run at once without doing
    the same work twice; each batch commits on its own, so a sweep that dies
    loses at most its current batch and the next sweep resumes where the NULLs
    are. Call repeatedly until ``scanned`` is 0.
    """
    report = EnrichmentReport()
    want_lemmas = kind in ("all", "lemmas")
    want_vectors = kind in ("all", "embeddings")
    with transaction.atomic():
        queryset = _pending(kind=kind, bucket=bucket, memory_ids=memory_ids)
        memories = list(queryset.order_by("created_at").select_for_update(skip_locked=True, of=("self",))[:batch_size])
        report.scanned = len(memories)
        if not memories:
            return report
        rows = [
            Row(
                item=MemoryInput(content=m.content, attributed_to=m.attributed_to),
                id=m.pk,
                text_hash=m.text_hash,
                created_at=m.created_at,
                context_text=m.context_text,
            )
            for m in memories
        ]
        if want_lemmas:
            lemmatize_rows(
                [
                    r
                    for r, m in zip(rows, memories, strict=True)
                    if m.text_lemmatized is None or (m.context_text and m.context_lemmatized is None)
                ]
            )
        if want_vectors:
            # Each row by its bucket's model, held until this batch commits. A bucket a switch
            # is swapping (locked) is skipped, not waited for: the swap waits for these rows.
            models = bucket_models_held({m.bucket_id for m in memories}, skip_locked=True)
            for model in set(models.values()):
                embed_rows(
                    [
                        r
                        for r, m in zip(rows, memories, strict=True)
                        if models.get(m.bucket_id) == model
                        and (m.embedding is None or (m.context_text and m.context_embedding is None))
                    ],
                    model=model,
                )
        for row, memory in zip(rows, memories, strict=True):
            fields = []
            if memory.text_lemmatized is None and row.text_lemmatized is not None:
                memory.text_lemmatized = row.text_lemmatized
                fields.append("text_lemmatized")
                report.lemmatized += 1
            if memory.context_text and memory.context_lemmatized is None and row.context_lemmatized is not None:
                memory.context_lemmatized = row.context_lemmatized
                fields.append("context_lemmatized")
                report.context_lemmatized += 1
            if memory.embedding is None and row.embedding is not None:
                memory.embedding = row.embedding
                fields.append("embedding")
                report.embedded += 1
                report.embedded_ids.append(memory.pk)
            if memory.context_text and memory.context_embedding is None and row.context_embedding is not None:
                memory.context_embedding = row.context_embedding
                fields.append("context_embedding")
                report.context_embedded += 1
            if {"embedding", "context_embedding"} & set(fields):
                memory.embedding_model = models[memory.bucket_id]
                fields.append("embedding_model")
            if fields:
                memory.save(update_fields=fields)
                note_writes(memory.bucket_id, 1)
            elif want_vectors and memory.bucket_id not in models:
                report.scanned -= 1  # left for the next sweep, once the swap is over
            else:
                report.failed += 1
    if report.failed:
        report.errors.append(f"{report.failed} row(s) could not be enriched (model or lemmatizer unavailable)")
    return report


def memories_enrich_all_pending(
    *,
    batch_size: int = 256,
    bucket: Bucket | None = None,
    kind: str = "all",
    memory_ids: Iterable | None = None,
    on_batch: Callable[[EnrichmentReport], None] | None = None,
) -> EnrichmentReport:
    """Run the sweep until nothing is left or a batch makes no progress.

    ``on_batch`` is called with each committed batch's report (progress bars,
    job heartbeats, follow-up work for the rows just embedded).
    """
    if memory_ids is not None:
        memory_ids = list(memory_ids)
    total = EnrichmentReport()
    while True:
        report = memories_enrich_pending(batch_size=batch_size, bucket=bucket, kind=kind, memory_ids=memory_ids)
        total.add(report)
        if report.scanned and on_batch is not None:
            on_batch(report)
        if report.scanned == 0 or report.failed == report.scanned:
            return total
