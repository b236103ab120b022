"""Maintenance bookkeeping: near-duplicate review candidates, scan cursors."""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q

from engram_site.db import TransactionNow
from engram_site.querysets import BucketScopedQuerySet
from memories.models import Memory
from tenants.models import Bucket, Tenant


class DuplicateStatus(models.TextChoices):
    PENDING = "pending", "pending"
    MERGED = "merged", "merged"
    KEPT_BOTH = "kept_both", "kept both"


class DuplicateCandidateQuerySet(BucketScopedQuerySet):
    def pending(self) -> DuplicateCandidateQuerySet:
        return self.filter(status=DuplicateStatus.PENDING)


class DuplicateCandidate(models.Model):
    """Two memories of one bucket whose texts differ (so the hash did not catch them)
    but whose embeddings are nearly the same: a pair for an operator to review.

    The pair is stored ordered (``memory_a < memory_b``) so each pair has exactly
    one row, whichever memory the scan found first. Tenant, bucket and both
    memories cascade in the database (migration 0001).
    """

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
    similarity = models.FloatField()
    status = models.CharField(max_length=20, choices=DuplicateStatus.choices, default=DuplicateStatus.PENDING)
    created_at = models.DateTimeField(db_default=TransactionNow(), editable=False)
    reviewed_at = models.DateTimeField(null=True, blank=True)

    objects = DuplicateCandidateQuerySet.as_manager()

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


class ConflictCandidateQuerySet(BucketScopedQuerySet):
    def open(self) -> ConflictCandidateQuerySet:
        return self.filter(status=ConflictStatus.OPEN)


class ConflictCandidate(models.Model):
    """Two memories of one bucket that likely contradict each other ("I'm vegetarian" /
    "I had steak again"): a pair for an operator to resolve — keep both, supersede one,
    or merge them.

    Found by the contradiction detector (``maintenance/contradictions.py``) in the
    background, after enrichment and in the hourly catch-up scan. ``code`` names the cue
    (``one_value``, ``diet``, ``negation``, ``antonym``) and ``reason`` says it for a
    person. The pair is stored ordered (``memory_a < memory_b``), one row per pair, so a
    pair an operator resolved is never raised again. A merge deletes one memory: the pair
    goes with it (the audit event ``conflict.merge`` is the record). Tenant, bucket and
    both memories cascade in the database (migration 0007).
    """

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

    objects = ConflictCandidateQuerySet.as_manager()

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

    @classmethod
    def agent_scope(cls, agents) -> Q:
        """The pairs an agent-limited token sees: both memories readable by it."""
        return agents.q("memory_a__agent_id") & agents.q("memory_b__agent_id")
