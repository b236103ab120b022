"""The conflict review: resolving the pairs the conflict detector raised.

Three resolutions, each in one transaction with its audit event:

- **keep both** — the memories do not contradict (or both stay true); only the pair's
  status changes, and the pair is never raised again (the detector inserts with
  ON CONFLICT DO NOTHING on the pair).
- **supersede** — one memory stays current and the other is marked superseded by it
  (``memories.services.supersession.memory_supersede``: a ``superseded`` version in
  the memory's history, a ``supersedes`` link, and retrieval demotes it).
- **merge** — one memory absorbs the other (``memories.services.merge.memories_absorb``:
  ``merged`` / ``edited`` versions, the absorbed row restorable until the purge), and
  may take new content that states what is true now (an ``edited`` version). The pair
  goes with the absorbed memory; the audit event ``conflict.merge`` keeps its content.

A supersede can be undone (:func:`conflict_undo`): the superseded memory is current again and
the pair open again, for another decision.

Found pairs are written by ``maintenance.services.conflicts`` (``conflicts_scan``, ``conflicts_find_for``);
the queue's machinery (locking a pair, following merges and erasure) is ``maintenance.review``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from audit.services import Actor, audit_record
from engram_site.exceptions import Conflict, DomainError, NotFound
from maintenance.models import ConflictCandidate, ConflictStatus
from maintenance.review import CONFLICTS, removed_record
from memories.models import Memory
from memories.services.edits import memory_update
from memories.services.merge import memories_absorb
from memories.services.supersession import memory_supersede
from tenants.models import Tenant

ACTIONS = ("keep_both", "supersede", "merge")
SIDES = ("a", "b")


@dataclass(frozen=True)
class ConflictResolution:
    candidate_id: int
    action: str
    status: str
    kept_id: uuid.UUID | None = None
    other_id: uuid.UUID | None = None


def _sides(candidate: ConflictCandidate, keep: str | None) -> tuple[uuid.UUID, uuid.UUID]:
    if keep not in SIDES:
        raise DomainError(f"keep must be one of {list(SIDES)}.", code="invalid")
    return candidate.sides(keep)


def conflict_resolve(
    *, candidate: ConflictCandidate, action: str, actor: Actor, keep: str | None = None, content: str | None = None
) -> ConflictResolution:
    """Resolve an open pair: ``keep_both``; ``supersede`` (``keep``: the side that stays
    current, "a" or "b"); or ``merge`` (``keep``: the side that absorbs the other, with
    ``content`` as its new text if given). A pair already resolved raises Conflict (409);
    nothing changes on any error."""
    if action not in ACTIONS:
        raise DomainError(f"action must be one of {list(ACTIONS)}.", code="invalid")
    if action == "keep_both" and (keep is not None or content is not None):
        raise DomainError("keep_both takes neither keep nor content.", code="invalid")
    if action == "supersede" and content is not None:
        raise DomainError("Only a merge takes new content.", code="invalid")
    if content is not None and not content.strip():
        raise DomainError("content must not be blank.", code="invalid")
    with CONFLICTS.deciding(candidate) as locked:
        kept, other = _sides(locked, keep) if action != "keep_both" else (None, None)
        details = {
            "candidate_id": locked.pk, "bucket_id": str(locked.bucket_id), "code": locked.code,
            "reason": locked.reason, "memory_a_id": str(locked.memory_a_id), "memory_b_id": str(locked.memory_b_id),
        }  # fmt: skip
        if action == "keep_both":
            locked.decide(ConflictStatus.KEPT_BOTH, by=actor.label, kept=kept)
        elif action == "supersede":
            _supersede(kept=kept, other=other, actor=actor)
            locked.decide(ConflictStatus.SUPERSEDED, by=actor.label, kept=kept)
            details |= {"kept_id": str(kept), "superseded_id": str(other)}
        else:
            gone = removed_record(other, fields=("content", "created_at", "hint_tags"))
            locked.decide(ConflictStatus.MERGED, by=actor.label, kept=kept)
            # The pair names the absorbed memory: the merge's re-pointing deletes it
            # (maintenance.review's repoint), so the audit event below is the record of the decision.
            memories_absorb(mapping={other: kept}, actor=actor)
            if content is not None:
                memory_update(memory=Memory.objects.select_related("bucket").get(pk=kept), actor=actor, content=content)
            details |= {
                "kept_id": str(kept), "removed_id": str(other), "content_replaced": content is not None,
                "removed": gone,
            }  # fmt: skip
        audit_record(
            actor=actor,
            action=f"conflict.{action}",
            tenant=Tenant(pk=locked.tenant_id),
            object_type="memory",
            object_ids=[locked.memory_a_id, locked.memory_b_id],
            details=details,
        )
    return ConflictResolution(
        candidate_id=locked.pk, action=action, status=str(locked.status), kept_id=kept, other_id=other
    )


def _supersede(*, kept: uuid.UUID, other: uuid.UUID, actor: Actor) -> None:
    """``other`` is superseded by ``kept``, now; if ``kept`` was itself marked superseded by
    ``other`` (the graph's timelines, say), that is undone, so the two never point at each other."""
    rows = {
        m.pk: m
        for m in Memory.objects.select_for_update().filter(pk__in=[kept, other]).only("id", "superseded_by")
        .order_by("pk")  # one lock order for every writer of these rows
    }  # fmt: skip
    if set(rows) != {kept, other}:
        raise NotFound("Memory not found.")
    if rows[kept].superseded_by == other:
        memory_supersede(memory_id=kept, at=None, by=None, previous_by=other, actor=actor)
    memory_supersede(memory_id=other, at=timezone.now(), by=kept, previous_by=rows[other].superseded_by, actor=actor)


@transaction.atomic
def conflict_undo(*, candidate: ConflictCandidate, actor: Actor) -> ConflictResolution:
    """Undo a supersede: the memory it marked superseded is current again (a ``superseded``
    version by ``actor`` in its history, the kept memory's ``supersedes`` link removed) and the
    pair is open again. The graph's own view comes back at its next recomputation: if a newer
    fact closes one of the memory's facts, the graph marks it superseded as it would have
    without the operator (an operator's supersession outranks the graph's; its undo does not).
    Audited as ``conflict.undo``. A pair not resolved by supersede raises Conflict
    (``not_superseded``, 409); nothing changes on any error."""
    locked = ConflictCandidate.objects.select_for_update().filter(pk=candidate.pk).first()
    if locked is None:
        raise NotFound(CONFLICTS.gone)
    if locked.status != ConflictStatus.SUPERSEDED or locked.kept_memory_id is None:
        raise Conflict("Only a pair resolved by supersede can be undone.", code="not_superseded")
    kept = locked.kept_memory_id
    other = locked.memory_b_id if kept == locked.memory_a_id else locked.memory_a_id
    row = Memory.objects.select_for_update().filter(pk=other).only("id", "superseded_by").first()
    # Someone may have superseded it otherwise since: only the supersession this pair made goes.
    undone = row is not None and row.superseded_by == kept
    if undone:
        memory_supersede(memory_id=other, at=None, by=None, previous_by=kept, actor=actor)
    locked.reopen()
    audit_record(
        actor=actor, action="conflict.undo", tenant=Tenant(pk=locked.tenant_id), object_type="memory",
        object_ids=[locked.memory_a_id, locked.memory_b_id],
        details={"candidate_id": locked.pk, "bucket_id": str(locked.bucket_id), "kept_id": str(kept),
                 "superseded_id": str(other), "supersession_removed": undone},
    )  # fmt: skip
    return ConflictResolution(
        candidate_id=locked.pk, action="undo", status=str(locked.status), kept_id=kept, other_id=other
    )
