"""The review queues: pairs of memories of one bucket waiting for an operator's decision.

Two queues share this machinery — near-duplicates (:class:`~maintenance.models.DuplicateCandidate`:
merge, or keep both; maintenance/services/duplicate_review.py) and conflicts
(:class:`~maintenance.models.ConflictCandidate`: keep both, supersede, or merge;
maintenance/services/conflict_review.py). What differs between them is declared once, in a
:class:`Queue`; what they do alike is written here once: locking a pair to decide it, and
following the memories they name when those merge, are erased, or move to another bucket
(maintenance/participants.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.db import connection, transaction
from django.db.models import QuerySet

from engram_site.exceptions import Conflict, NotFound
from maintenance.models import ConflictCandidate, DuplicateCandidate, ReviewPair
from memories.models import Memory
from tenants.models import Bucket, Tenant

# Pairs re-pointed per query after a merge: bounds each statement's parameter list.
REPOINT_BATCH = 5000


@dataclass(frozen=True)
class Queue:
    model: type[ReviewPair]
    # The fields besides ``status`` that record a decision (a merge's re-pointing keeps them).
    decision: tuple[str, ...]
    # The order an operator reviews the pairs in (each table has an index for it).
    order: tuple[str, ...]
    # The key of the queue's rows in the counts of an erasure or a bucket merge.
    counted_as: str
    # What deciding a pair answers when it is gone (404), and when it was decided already (409).
    gone: str
    decided: str  # with {status}, the status's label
    decided_code: str

    @contextmanager
    def deciding(self, pair: ReviewPair) -> Iterator[ReviewPair]:
        """``pair``, locked (FOR UPDATE) in a transaction the block runs in, and still waiting:
        NotFound if it is gone, Conflict if someone decided it first. An error in the block rolls
        the decision back."""
        with transaction.atomic():
            locked = self.model.objects.select_for_update().filter(pk=pair.pk).first()
            if locked is None:
                raise NotFound(self.gone)
            if locked.status != self.model.UNDECIDED:
                raise Conflict(self.decided.format(status=locked.get_status_display()), code=self.decided_code)
            yield locked

    def repoint(self, *, mapping: dict[uuid.UUID, uuid.UUID]) -> int:
        """Pairs naming an absorbed memory name its survivor instead (``mapping``: absorbed ->
        survivor); returns how many rows now name other memories.

        A pair that becomes a memory with itself is deleted. A pair that already exists keeps one
        row, and a decision wins over a waiting state, so a pair an operator decided is never
        raised again.
        """
        if not mapping:
            return 0
        with connection.cursor() as cur:
            # memory_a leads the pair's unique index, memory_b has an index of its own.
            cur.execute(
                f"SELECT id FROM {self.model._meta.db_table}"
                " WHERE memory_a_id = ANY(%s) OR memory_b_id = ANY(%s) ORDER BY id",
                [list(mapping), list(mapping)],
            )
            ids = [row[0] for row in cur.fetchall()]
        changed = 0
        for start in range(0, len(ids), REPOINT_BATCH):
            changed += self._repoint(self.model.objects.filter(pk__in=ids[start : start + REPOINT_BATCH]), mapping)
        return changed

    def _repoint(self, pairs: QuerySet, mapping: dict[uuid.UUID, uuid.UUID]) -> int:
        changed = 0
        for pair in pairs.order_by("pk").select_for_update():
            a = mapping.get(pair.memory_a_id, pair.memory_a_id)
            b = mapping.get(pair.memory_b_id, pair.memory_b_id)
            if a == b:
                pair.delete()
                continue
            a, b = sorted([a, b])  # uuid order == PostgreSQL's uuid order (each table's pair-order check)
            existing = self.model.objects.filter(memory_a_id=a, memory_b_id=b).exclude(pk=pair.pk).first()
            if existing is not None:
                if existing.status == self.model.UNDECIDED and pair.status != self.model.UNDECIDED:
                    for name in ("status", *self.decision):
                        setattr(existing, name, getattr(pair, name))
                    existing.save(update_fields=["status", *self.decision])
                pair.delete()
                continue
            pair.memory_a_id, pair.memory_b_id = a, b
            pair.save(update_fields=["memory_a", "memory_b"])
            changed += 1
        return changed

    def erase(self, *, tenant: Tenant, memory_ids: list[uuid.UUID]) -> int:
        """Delete the pairs of erased memories, decided or not; returns how many. Their foreign
        keys would cascade too: deleting them here counts them."""
        return self.model.objects.for_tenant(tenant).naming(memory_ids).delete()[0]

    def move(self, *, source: Bucket, target: Bucket) -> int:
        """Move ``source``'s pairs to ``target`` (a bucket merge); returns how many."""
        return self.model.objects.for_bucket(source).update(bucket_id=target.pk)


def removed_record(memory_id: uuid.UUID, *, fields: tuple[str, ...]) -> dict:
    """What the audit event of a merge keeps of the memory it removes: ``fields`` of it, with the
    first 2,000 characters of its content (the pair goes with the memory, the event stays)."""
    gone = Memory.objects.filter(pk=memory_id).values(*fields).first() or {}
    return {**gone, "content": gone.get("content", "")[:2000]}


DUPLICATES = Queue(
    model=DuplicateCandidate,
    decision=("reviewed_at",),
    order=("-similarity", "pk"),
    counted_as="duplicate_candidates",
    gone="This pair is no longer in the review queue.",
    decided="This pair was already reviewed ({status}).",
    decided_code="already_reviewed",
)
CONFLICTS = Queue(
    model=ConflictCandidate,
    decision=("resolved_at", "resolved_by", "kept_memory_id"),
    order=("-found_at", "-pk"),
    counted_as="conflict_candidates",
    gone="Conflict not found.",
    decided="This pair was already resolved ({status}).",
    decided_code="already_resolved",
)
QUEUES = (DUPLICATES, CONFLICTS)
