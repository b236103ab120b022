"""Recompute stored lexical documents with the current lemmatizer.

A memory's BM25 document (``text_lemmatized``, and ``context_lemmatized`` for its context) is
made once, when it is written. When the lemmatizer changes, the documents stored before the
change keep the old terms while questions are lemmatised the new way, and the two no longer
meet. This walks a bucket's memories (or every bucket's) in id order, lemmatises them again
exactly as a write would (:func:`memories.services.ingest.derived.lemmatize_rows`) and rewrites
only the rows whose document changed.

Batched, one transaction per batch; rows are claimed with ``FOR UPDATE SKIP LOCKED``, so a row
an edit is rewriting at that moment is left to the edit (which recomputes its lemmas itself).
Resumable: a run that stops has committed its batches, and a later run rewrites none of them
again (their documents no longer differ); it reads them again, which costs the lemmatizer's
time only (about 12 ms per 1,000 short memories).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from django.db import transaction

from engram_site import activity
from memories.models import Memory
from memories.services.ingest.derived import lemmatize_rows
from memories.services.ingest.rows import MemoryInput, Row
from memories.services.stats_cache import forget_stats
from tenants.models import Bucket


@dataclass
class RelemmatizeReport:
    scanned: int = 0
    rewritten: int = 0

    def counts(self) -> dict[str, int]:
        return {"scanned": self.scanned, "rewritten": self.rewritten}


def memories_relemmatize(
    *,
    bucket: Bucket | None = None,
    batch_size: int = 500,
    on_batch: Callable[[int], None] | None = None,
) -> RelemmatizeReport:
    """Lemmatise again the memories that have a lexical document (those without one are the
    enrichment sweep's: ``lemmatize_missing``). Raises ``LemmatizerUnavailable`` when spaCy
    cannot be loaded: nothing is rewritten with fallback terms."""
    report = RelemmatizeReport()
    after: uuid.UUID | None = None
    while True:
        activity.pause()
        with transaction.atomic():
            queryset = Memory.objects.all() if bucket is None else Memory.objects.for_bucket(bucket)
            queryset = queryset.filter(text_lemmatized__isnull=False)
            if after is not None:
                queryset = queryset.filter(pk__gt=after)
            memories = list(
                queryset.order_by("pk")
                .select_for_update(skip_locked=True, of=("self",))
                .only("id", "bucket_id", "content", "attributed_to", "created_at", "context_text",
                      "text_lemmatized", "context_lemmatized")[:batch_size]
            )  # fmt: skip
            if not memories:
                return report
            rows = [
                Row(
                    item=MemoryInput(content=m.content, attributed_to=m.attributed_to),
                    id=m.pk,
                    text_hash="",
                    created_at=m.created_at,
                    context_text=m.context_text,
                )
                for m in memories
            ]
            lemmatize_rows(rows, strict=True)
            changed = set()
            for row, memory in zip(rows, memories, strict=True):
                fields = []
                if row.text_lemmatized != memory.text_lemmatized:
                    memory.text_lemmatized = row.text_lemmatized
                    fields.append("text_lemmatized")
                if memory.context_lemmatized is not None and row.context_lemmatized != memory.context_lemmatized:
                    memory.context_lemmatized = row.context_lemmatized
                    fields.append("context_lemmatized")
                if fields:
                    memory.save(update_fields=fields)
                    report.rewritten += 1
                    changed.add(memory.bucket_id)
        # This process's document frequencies of those buckets are counted again; other
        # processes renew theirs within ten minutes (docs/RETRIEVAL.md).
        forget_stats(changed)
        report.scanned += len(memories)
        after = memories[-1].pk
        if on_batch is not None:
            on_batch(len(memories))
