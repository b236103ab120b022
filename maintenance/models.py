"""Maintenance bookkeeping: the review queues' pairs (near-duplicates, conflicts), scan cursors."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Self

from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from engram_site.db import TransactionNow
from engram_site.querysets import BucketScopedQuerySet
from engram_site.scoping import scoped_manager
from memories.models import Memory
from tenants.models import Bucket, Tenant


class DuplicateStatus(models.TextChoices):
    PENDING = "pending", "pending"
    MERGED = "merged", "merged"
    KEPT_BOTH = "kept_both", "kept both"


# Memory columns a review page never shows (the vectors and the lemmas are most of a row).
HEAVY_MEMORY_FIELDS = ("embedding", "context_embedding", "text_lemmatized", "context_lemmatized")


class ReviewPairQuerySet(BucketScopedQuerySet):
    """The pairs of a review queue (maintenance/review.py)."""

    def undecided(self) -> Self:
        """The pairs waiting for an operator: pending near-duplicates, open conflicts."""
        return self.filter(status=self.model.UNDECIDED)

    def naming(self, memory_ids: Iterable[uuid.UUID]) -> Self:
        """The pairs of which one memory is in ``memory_ids``."""
        ids = list(memory_ids)
        # memory_a leads the pair's unique index, memory_b has an index of its own.
        return self.filter(Q(memory_a_id__in=ids) | Q(memory_b_id__in=ids))

    def with_memories(self) -> Self:
        """Both memories read along, without the columns a review page never shows."""
        return self.select_related("memory_a", "memory_b").defer(
            *(f"memory_{side}__{name}" for side in "ab" for name in HEAVY_MEMORY_FIELDS)
        )


class ReviewPair(models.Model):
    """Two memories of one bucket for an operator to decide on: what every review queue's row has.

    The pair is stored ordered (``memory_a < memory_b``, a check constraint of each table), so a
    pair has exactly one row whichever memory a scan found first, and a decided pair is never
    raised again (the scans insert with ON CONFLICT DO NOTHING on the pair). Tenant, bucket and
    both memories cascade in the database.
    """

    # The status of a pair waiting for a decision; ``decide`` records the others.
    UNDECIDED: str

    tenant = models.ForeignKey(
        Tenant, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    bucket = models.ForeignKey(
        Bucket, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    memory_a = models.ForeignKey(
        Memory, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    memory_b = models.ForeignKey(
        Memory, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )

    class Meta:
        abstract = True

    def sides(self, keep: str) -> tuple[uuid.UUID, uuid.UUID]:
        """(the memory kept, the other one) for ``keep``, "a" or "b"."""
        if keep == "a":
            return self.memory_a_id, self.memory_b_id
        return self.memory_b_id, self.memory_a_id


class DuplicateCandidate(ReviewPair):
    """Two memories of one bucket whose texts differ (so the hash did not catch them)
    but whose embeddings are nearly the same: a pair for an operator to review (merge, or
    keep both). The cascades are migration 0001's.
    """

    UNDECIDED = DuplicateStatus.PENDING

    similarity = models.FloatField()
    status = models.CharField(max_length=20, choices=DuplicateStatus.choices, default=DuplicateStatus.PENDING)
    created_at = models.DateTimeField(db_default=TransactionNow(), editable=False)
    reviewed_at = models.DateTimeField(null=True, blank=True)

    objects = ReviewPairQuerySet.as_manager()

    class Meta:
        db_table = "duplicate_candidates"
        ordering = ["-similarity"]
        constraints = [
            # One row per pair: the scan inserts with ON CONFLICT DO NOTHING on this index.
            models.UniqueConstraint(fields=["memory_a", "memory_b"], name="dupcand_pair_unique"),
            models.CheckConstraint(condition=Q(memory_a__lt=F("memory_b")), name="dupcand_pair_ordered"),
        ]
        indexes = [
            # The review queue: WHERE tenant_id = ? AND bucket_id = ? AND status = 'pending'
            # ORDER BY similarity DESC.
            models.Index(fields=["tenant", "bucket", "status", "-similarity"], name="dupcand_review"),
            # Cascade from a deleted memory looks candidates up by memory_b (memory_a is
            # the leading column of the unique index).
            models.Index(fields=["memory_b"], name="dupcand_memory_b"),
        ]

    def __str__(self) -> str:
        return f"{self.memory_a_id} ~ {self.memory_b_id} ({self.similarity:.3f})"

    def decide(self, status: str) -> None:
        """Record an operator's decision on this (locked) pair."""
        self.status, self.reviewed_at = status, timezone.now()
        self.save(update_fields=["status", "reviewed_at"])


class ScanCursor(models.Model):
    """How far an incremental job has scanned a bucket, in (created_at, id) order.

    ``scan_near_duplicates`` and ``link_memories`` visit each memory once after
    its embedding exists; the cursor is the last memory visited, so a run only
    looks at rows after it.
    """

    tenant = models.ForeignKey(
        Tenant, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    bucket = models.ForeignKey(
        Bucket, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    job = models.CharField(max_length=50)
    position_at = models.DateTimeField(null=True, blank=True)
    position_id = models.UUIDField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = BucketScopedQuerySet.as_manager()

    class Meta:
        db_table = "maintenance_scan_cursors"
        constraints = [
            # One cursor per bucket and job; also serves the lookup by (tenant, bucket, job).
            models.UniqueConstraint(fields=["tenant", "bucket", "job"], name="scan_cursor_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.job} @ {self.position_at}"


class ConflictStatus(models.TextChoices):
    OPEN = "open", "open"
    KEPT_BOTH = "kept_both", "kept both"
    SUPERSEDED = "superseded", "superseded"
    MERGED = "merged", "merged"


class ConflictCandidate(ReviewPair):
    """Two memories of one bucket that likely contradict each other ("I'm vegetarian" /
    "I had steak again"): a pair for an operator to resolve — keep both, supersede one,
    or merge them.

    Found by the conflict detector (``maintenance/conflict_detector/``) in the
    background, after enrichment and in the hourly catch-up scan. ``code`` names the cue
    (``one_value``, ``quantity``, ``schedule``, ``diet``, ``negation``, ``antonym``) and ``reason`` says it for a
    person. A merge deletes one memory: the pair goes with it (the audit event
    ``conflict.merge`` is the record). The cascades are migration 0007's.
    """

    UNDECIDED = ConflictStatus.OPEN

    code = models.CharField(max_length=20)
    reason = models.TextField()
    score = models.FloatField()
    # Cosine similarity of the two embeddings when the pair was found.
    similarity = models.FloatField(null=True, blank=True)
    detector_version = models.IntegerField(default=1)
    status = models.CharField(max_length=20, choices=ConflictStatus.choices, default=ConflictStatus.OPEN)
    found_at = models.DateTimeField(db_default=TransactionNow(), editable=False)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.CharField(max_length=200, blank=True, default="")
    # The memory that stayed current (superseded) or absorbed the other (merged).
    kept_memory_id = models.UUIDField(null=True, blank=True)

    objects = ReviewPairQuerySet.as_manager()

    class Meta:
        db_table = "conflict_candidates"
        ordering = ["-found_at", "-id"]
        constraints = [
            # One row per pair: the detector inserts with ON CONFLICT DO NOTHING on this index.
            models.UniqueConstraint(fields=["memory_a", "memory_b"], name="conflict_pair_unique"),
            models.CheckConstraint(condition=Q(memory_a__lt=F("memory_b")), name="conflict_pair_ordered"),
        ]
        indexes = [
            # The API list and the review queue: WHERE tenant_id = ? AND bucket_id = ? AND status = ?
            # ORDER BY found_at DESC, id DESC.
            models.Index(fields=["tenant", "bucket", "status", "-found_at", "-id"], name="conflict_review"),
            # Cascade from a deleted memory and the merge's re-pointing look pairs up by memory_b
            # (memory_a is the leading column of the unique index).
            models.Index(fields=["memory_b"], name="conflict_memory_b"),
        ]

    def __str__(self) -> str:
        return f"{self.memory_a_id} ≠ {self.memory_b_id} ({self.code})"

    def decide(self, status: str, *, by: str, kept: uuid.UUID | None) -> None:
        """Record an operator's resolution of this (locked) pair: who, and the memory kept."""
        self.status = status
        self.resolved_at, self.resolved_by, self.kept_memory_id = timezone.now(), by[:200], kept
        self.save(update_fields=["status", "resolved_at", "resolved_by", "kept_memory_id"])

    def reopen(self) -> None:
        """This (locked) pair waits for a decision again (its resolution was undone)."""
        self.status, self.resolved_at, self.resolved_by, self.kept_memory_id = ConflictStatus.OPEN, None, "", None
        self.save(update_fields=["status", "resolved_at", "resolved_by", "kept_memory_id"])

    @classmethod
    def agent_scope(cls, agents) -> Q:
        """The pairs an agent-limited token sees: both memories readable by it."""
        return agents.q("memory_a__agent_id") & agents.q("memory_b__agent_id")


class PendingComparison(models.Model):
    """A new memory waiting for the per-write checks: near-duplicates, contradictions, links.

    Written with the write's follow-up request (maintenance/receivers.py), taken a batch at a
    time by the bucket's ``compare`` stage (maintenance.tasks.compare_bucket), which deletes the
    rows it has done. Classification needs no such list (a NULL label is its own), nor do the
    hourly scans (their cursors), but a memory written with an older ``created_at`` than a
    scan's cursor is only found by these checks: the list keeps it until they have run, whatever
    happened to the message that asked for them. Deleted with its memory (ON DELETE CASCADE).
    """

    memory = models.OneToOneField(
        Memory, primary_key=True, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    created_at = models.DateTimeField(db_default=TransactionNow())

    objects = scoped_manager(tenant="memory__tenant_id")

    class Meta:
        db_table = "maintenance_pending_comparisons"

    def __str__(self) -> str:
        return str(self.memory_id)
