"""The near-duplicate review: an operator merges a pair or keeps both (the console's review queue)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from audit.services import Actor, audit_record
from engram_site.exceptions import Conflict, DomainError, NotFound
from maintenance.models import DuplicateCandidate, DuplicateStatus
from maintenance.review import DUPLICATES, removed_record
from memories.models import Memory
from memories.services.merge import memories_absorb
from tenants.models import Tenant

KEEP_CHOICES = ("a", "b")
BULK_KEEP_CHOICES = ("a", "b", "older", "newer")


@dataclass(frozen=True)
class DuplicateMergeResult:
    candidate_id: int
    kept_id: uuid.UUID
    removed_id: uuid.UUID


@dataclass
class BulkReviewResult:
    done: int = 0
    # Candidates already resolved, or removed by an earlier merge of the same batch.
    skipped: int = 0


def duplicate_merge(*, candidate: DuplicateCandidate, keep: str, actor: Actor) -> DuplicateMergeResult:
    """Resolve a near-duplicate pair by keeping one memory (``keep``: "a" or "b").

    In one transaction: the kept memory absorbs the other (tags and links united,
    other memories' links, supersession, graph mentions and edges and other candidates
    re-pointed to it — ``memories.services.merge.memories_absorb``), and the other memory is
    **deleted**. The candidate row goes with it (its foreign keys cascade), so the
    audit event ``duplicate.merge`` — which keeps the removed memory's content — is
    the record of the decision.
    """
    if keep not in KEEP_CHOICES:
        raise DomainError(f"keep must be one of {list(KEEP_CHOICES)}.")
    with DUPLICATES.deciding(candidate) as locked:
        kept, removed = locked.sides(keep)
        gone = removed_record(removed, fields=("content", "created_at", "hint_tags", "attributed_to"))
        locked.decide(DuplicateStatus.MERGED)
        memories_absorb(mapping={removed: kept}, actor=actor)
        audit_record(
            actor=actor,
            action="duplicate.merge",
            tenant=Tenant(pk=locked.tenant_id),
            object_type="memory",
            object_ids=[kept, removed],
            details={
                "candidate_id": locked.pk,
                "bucket_id": str(locked.bucket_id),
                "similarity": round(locked.similarity, 4),
                "kept_id": str(kept),
                "removed_id": str(removed),
                "removed": gone,
            },
        )
    return DuplicateMergeResult(candidate_id=locked.pk, kept_id=kept, removed_id=removed)


def duplicate_keep_both(*, candidate: DuplicateCandidate, actor: Actor) -> bool:
    """Mark a pair as not duplicates. The scans insert pairs with ON CONFLICT DO NOTHING
    on the pair's unique index, so this pair is never suggested again."""
    return duplicates_keep_both(candidates=DuplicateCandidate.objects.filter(pk=candidate.pk), actor=actor).done == 1


def duplicates_keep_both(*, candidates, actor: Actor) -> BulkReviewResult:
    """Keep both memories of every pending pair in ``candidates`` (one audit event per tenant)."""
    result = BulkReviewResult()
    with transaction.atomic():
        rows = list(candidates.select_for_update().order_by("pk"))
        pending = [c for c in rows if c.status == DuplicateStatus.PENDING]
        result.skipped = len(rows) - len(pending)
        DuplicateCandidate.objects.filter(pk__in=[c.pk for c in pending]).update(
            status=DuplicateStatus.KEPT_BOTH, reviewed_at=timezone.now()
        )
        result.done = len(pending)
        by_tenant: dict = {}
        for c in pending:
            by_tenant.setdefault(c.tenant_id, []).append(c)
        for tenant_id, group in by_tenant.items():
            audit_record(
                actor=actor,
                action="duplicate.keep_both",
                tenant=Tenant(pk=tenant_id),
                object_type="duplicate_candidate",
                object_ids=[c.pk for c in group],
                details={"pairs": [[str(c.memory_a_id), str(c.memory_b_id)] for c in group[:50]]},
            )
    return result


def duplicates_merge(*, candidates, keep: str, actor: Actor) -> BulkReviewResult:
    """Merge every pending pair in ``candidates``, keeping "a", "b", the "older" or the
    "newer" memory of each. Each pair is its own transaction (and audit event); pairs an
    earlier merge of the batch removed or re-pointed are skipped."""
    if keep not in BULK_KEEP_CHOICES:
        raise DomainError(f"keep must be one of {list(BULK_KEEP_CHOICES)}.")
    result = BulkReviewResult()
    for candidate_id in list(candidates.order_by("-similarity", "pk").values_list("pk", flat=True)):
        candidate = DuplicateCandidate.objects.undecided().filter(pk=candidate_id).first()
        if candidate is None:
            result.skipped += 1
            continue
        side = keep
        if keep in ("older", "newer"):
            times = dict(
                Memory.objects.filter(pk__in=[candidate.memory_a_id, candidate.memory_b_id]).values_list(
                    "id", "created_at"
                )
            )
            a_older = (times.get(candidate.memory_a_id), str(candidate.memory_a_id)) <= (
                times.get(candidate.memory_b_id),
                str(candidate.memory_b_id),
            )
            side = "a" if a_older == (keep == "older") else "b"
        try:
            duplicate_merge(candidate=candidate, keep=side, actor=actor)
        except (NotFound, Conflict):
            result.skipped += 1
            continue
        result.done += 1
    return result
