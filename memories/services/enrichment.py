"""The enrichment sweep: derived columns (lemmas, embeddings) a write could not compute.

A write stores its row even when the model or the lemmatizer is down, leaving the derived
column NULL; this sweep fills those rows in (``idx_memories_enrich_pending``). A row the model
fails on by itself is found (memories/services/enrichment_failures.py), recorded with its error
and skipped until its retry time, while the rest of its batch is enriched.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import Q

from engram_site import activity
from engram_site.providers import embedding, lemmatizer
from memories.models import PENDING_ENRICHMENT, EnrichmentStage, Memory
from memories.services.enrichment_failures import deferred, failures_clear, failures_record, isolate
from memories.services.ingest.derived import embed_rows, lemmatize_rows
from memories.services.ingest.locks import bucket_models_held
from memories.services.ingest.rows import MemoryInput, Row
from memories.services.stats_cache import note_writes
from tenants.models import AgentRestriction, Bucket

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
    # Rows left as they were because the model or the lemmatizer failed as a whole.
    failed: int = 0
    # Rows a stage failed on by themselves: recorded in enrichment_failures, retried later.
    failures_recorded: int = 0
    errors: list[str] = field(default_factory=list)
    # Rows that got their embedding in this sweep (classification, near-duplicate
    # scans and links need it and can follow).
    embedded_ids: list[uuid.UUID] = field(default_factory=list)

    COUNTERS = (
        "scanned", "embedded", "lemmatized", "context_embedded", "context_lemmatized", "failed", "failures_recorded",
    )  # fmt: skip

    def add(self, other: EnrichmentReport) -> None:
        for name in self.COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.errors += other.errors
        self.embedded_ids += other.embedded_ids

    def counts(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.COUNTERS}


def _pending(*, kind: str, bucket: Bucket | None, memory_ids: Iterable | None):
    """The rows the sweep takes: missing a column of ``kind`` whose stage is not waiting for its
    retry time (a row whose embedding keeps failing still gets its lemmas)."""
    if kind not in ENRICHMENT_KINDS:
        raise ValueError(f"unknown enrichment kind {kind!r}; expected one of {sorted(ENRICHMENT_KINDS)}")
    vectors = _EMBEDDINGS_MISSING & ~deferred(EnrichmentStage.EMBEDDING)
    lemmas = _LEMMAS_MISSING & ~deferred(EnrichmentStage.LEMMAS)
    due = {"all": vectors | lemmas, "embeddings": vectors, "lemmas": lemmas}[kind]
    queryset = Memory.objects.filter(ENRICHMENT_KINDS[kind] & due)
    if bucket is not None:
        queryset = queryset.for_bucket(bucket)
    if memory_ids is not None:
        queryset = queryset.filter(pk__in=list(memory_ids))
    return queryset


def pending_enrichment_count(
    *, bucket: Bucket | None = None, kind: str = "all", agents: AgentRestriction | None = None
) -> int:
    """Rows waiting for enrichment (``agents``: of those a token held to agents may read)."""
    return _pending(kind=kind, bucket=bucket, memory_ids=None).visible_to(agents).count()


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

    A row the model (or lemmatizer) fails on by itself does not hold back the batch: it is
    found by halving the failed call, gets a failure record for its stage (attempts, error,
    next retry time with exponential backoff) in the batch's transaction, and is skipped until
    that time (``failures_recorded``). A model that fails on everything blames no row:
    ``failed`` counts the rows left as they were, and ``errors`` says why.
    """
    report = EnrichmentReport()
    want_lemmas = kind in ("all", "lemmas")
    want_vectors = kind in ("all", "embeddings")
    with transaction.atomic():
        queryset = _pending(kind=kind, bucket=bucket, memory_ids=memory_ids)
        memories = list(
            queryset.annotate(
                embedding_deferred=deferred(EnrichmentStage.EMBEDDING), lemmas_deferred=deferred(EnrichmentStage.LEMMAS)
            )
            .order_by("created_at")
            .select_for_update(skip_locked=True, of=("self",))[:batch_size]
        )
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
        # Each row by its bucket's model, held until this batch commits. A bucket a switch is
        # swapping (locked) is skipped, not waited for: the swap waits for these rows.
        models = bucket_models_held({m.bucket_id for m in memories}, skip_locked=True) if want_vectors else {}
        lemma_rows = [
            r
            for r, m in zip(rows, memories, strict=True)
            if want_lemmas
            and not m.lemmas_deferred
            and (m.text_lemmatized is None or (m.context_text and m.context_lemmatized is None))
        ]
        vector_rows = {
            model: [
                r
                for r, m in zip(rows, memories, strict=True)
                if models.get(m.bucket_id) == model
                and not m.embedding_deferred
                and (m.embedding is None or (m.context_text and m.context_embedding is None))
            ]
            for model in set(models.values())
        }
        lemmas = isolate(lemma_rows, _lemmatize, key=_row_id, probe=_lemmatizer_problem)
        vectors = {
            model: isolate(
                group,
                lambda batch, model=model: _embed(batch, model),
                key=_row_id,
                probe=lambda model=model: _embedding_problem(model),
            )
            for model, group in vector_rows.items()
        }
        left = {r.id for r in lemma_rows if lemmas.outage} | {
            r.id for model, group in vector_rows.items() if vectors[model].outage for r in group
        }
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
            if memory.pk in left:
                report.failed += 1
        # The rows a stage failed on by themselves get (or update) a failure record; the rows
        # it succeeded for lose theirs. An outage blames no row.
        recorded: set = set()
        for stage, attempted, result in (
            (EnrichmentStage.LEMMAS, lemma_rows, lemmas),
            *((EnrichmentStage.EMBEDDING, vector_rows[model], vectors[model]) for model in vector_rows),
        ):
            if result.outage:
                report.errors.append(f"{len(attempted)} row(s) could not be enriched ({stage}): {result.outage}")
                continue
            failures_record(stage=stage, errors=result.errors)
            failures_clear(stage=stage, memory_ids=[r.id for r in attempted if r.id not in result.errors])
            recorded |= set(result.errors)
        report.failures_recorded = len(recorded)
    return report


def _row_id(row: Row):
    return row.id


def _embed(rows: list[Row], model: str) -> dict:
    """Embed ``rows`` in place by ``model``; the ids of those whose vector the model got wrong.
    Raises when the model call fails (:func:`~memories.services.enrichment_failures.isolate`
    halves the batch)."""
    for row in rows:
        row.embedding = row.context_embedding = None
    embed_rows(list(rows), model=model, strict=True)
    return {
        r.id: "the embedding model returned an unusable vector (NaN, zero or not of unit length)"
        for r in rows
        if r.embedding is None or (r.context_text and r.context_embedding is None)
    }


def _lemmatize(rows: list[Row]) -> dict:
    lemmatize_rows(list(rows), strict=True)
    return {}


def _embedding_problem(model: str) -> str | None:
    """Why the embedding model fails on a text it always embeds, or None: it works."""
    try:
        vector = embedding.embed_texts(["A short note to check that the model works."], model=model)[0]
    except embedding.EmbeddingUnavailable as exc:
        return str(exc)
    return None if embedding.usable(vector) else "the embedding model returns unusable vectors"


def _lemmatizer_problem() -> str | None:
    try:
        lemmatizer.lemmatize_many(["A short note to check that the lemmatizer works."])
    except Exception as exc:
        return str(exc) or type(exc).__name__
    return None


def memories_enrich_all_pending(
    *,
    batch_size: int = 256,
    bucket: Bucket | None = None,
    kind: str = "all",
    memory_ids: Iterable | None = None,
    on_batch: Callable[[EnrichmentReport], None] | None = None,
) -> EnrichmentReport:
    """Run the sweep until nothing is left or the model (or lemmatizer) fails on a whole batch.

    ``on_batch`` is called with each committed batch's report (progress bars,
    job heartbeats, follow-up work for the rows just embedded).
    """
    if memory_ids is not None:
        memory_ids = list(memory_ids)
    total = EnrichmentReport()
    while True:
        activity.pause()
        report = memories_enrich_pending(batch_size=batch_size, bucket=bucket, kind=kind, memory_ids=memory_ids)
        total.add(report)
        if report.scanned and on_batch is not None:
            on_batch(report)
        if report.scanned == 0 or report.failed == report.scanned:
            return total
