"""Marking memories superseded (``superseded_at``, ``superseded_by``) with their ``supersedes`` links.

The graph decides from temporal facts which memory replaced which (graph/services/timelines.py);
the rows and links change here, together.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from audit.models import ActorKind
from audit.services import Actor
from memories.models import Memory, MemoryVersion, VersionKind
from memories.services.history import Change, versions_record
from memories.services.links import links_add, links_remove
from tenants.models import Bucket


def memory_supersede(
    *,
    memory_id: uuid.UUID,
    at: datetime | None,
    by: uuid.UUID | None,
    previous_by: uuid.UUID | None,
    actor: Actor | None = None,
) -> None:
    """``by`` superseded ``memory_id`` at ``at`` (both None: nothing supersedes it any more).

    The successor's ``supersedes`` link follows: removed from ``previous_by`` (the successor
    recorded until now) when that changes, added to ``by``. The ``superseded`` version names
    ``actor`` (None: Engram itself, e.g. the graph's timelines; an operator or a token resolving
    a contradiction otherwise).

    A person's decision stands: Engram (``actor`` None) does not change a supersession that an
    operator or a token made (the graph's hourly recomputation would otherwise undo it).
    """
    before = (
        Memory.objects.filter(pk=memory_id).values("tenant_id", "bucket_id", "superseded_at", "superseded_by").first()
    )
    if before is None:
        return
    changing = (before["superseded_at"], before["superseded_by"]) != (at, by)
    if actor is None and changing and _decided_by_a_person(memory_id, successor=before["superseded_by"]):
        return
    if (before["superseded_at"], before["superseded_by"]) != (at, by):
        Memory.objects.filter(pk=memory_id).update(superseded_at=at, superseded_by=by)
        previous = {"superseded_at": before["superseded_at"], "superseded_by": before["superseded_by"]}
        change = Change(memory_id, before["tenant_id"], before["bucket_id"], previous, {"by": by})
        versions_record(kind=VersionKind.SUPERSEDED, changes=[change], actor=actor)
    if previous_by and previous_by != by:
        links_remove(memory_id=previous_by, target=memory_id, kind="supersedes")
    if by:
        links_add(memory_id=by, links=[(memory_id, "supersedes")])


def _decided_by_a_person(memory_id: uuid.UUID, *, successor: uuid.UUID | None) -> bool:
    """Was the memory's current supersession made by an operator or a token (and does the
    memory that superseded it still exist)?"""
    if successor is None or not Memory.objects.filter(pk=successor).exists():
        return False
    # idx_versions_memory: the memory's latest supersession, and who made it.
    latest = (
        MemoryVersion.objects.filter(memory_id=memory_id, kind=VersionKind.SUPERSEDED)
        .order_by("-id")
        .values_list("actor_kind", flat=True)
        .first()
    )
    return latest in (ActorKind.OPERATOR, ActorKind.TOKEN)


def _decided_by_people(rows: list[tuple]) -> set[uuid.UUID]:
    """Among superseded (id, superseded_at, superseded_by) rows, those whose supersession an
    operator or a token made and whose successor still exists (:func:`_decided_by_a_person`,
    set-based: a rebuild reads a bucket's superseded memories at once)."""
    decided: set[uuid.UUID] = set()
    for start in range(0, len(rows), 5000):
        batch = rows[start : start + 5000]
        # idx_versions_memory: each memory's latest supersession, and who made it.
        latest = (
            MemoryVersion.objects.filter(memory_id__in=[r[0] for r in batch], kind=VersionKind.SUPERSEDED)
            .order_by("memory_id", "-id")
            .distinct("memory_id")
            .values_list("memory_id", "actor_kind")
        )
        by_person = {m for m, kind in latest if kind in (ActorKind.OPERATOR, ActorKind.TOKEN)}
        successors = {r[2] for r in batch if r[0] in by_person}
        alive = set(Memory.objects.filter(pk__in=successors).values_list("id", flat=True))
        decided |= {r[0] for r in batch if r[0] in by_person and r[2] in alive}
    return decided


def supersessions_clear(*, bucket: Bucket) -> int:
    """Undo every supersession of ``bucket`` that Engram made (a graph rebuild starts from none);
    returns how many. A supersession an operator or a token made stays: it is a decision, not
    derived data, and the rebuild's recomputation leaves it as it is (:func:`memory_supersede`)."""
    superseded = Memory.objects.for_bucket(bucket).filter(superseded_by__isnull=False)
    rows = list(superseded.values_list("id", "superseded_at", "superseded_by"))
    decided = _decided_by_people(rows)
    rows = [row for row in rows if row[0] not in decided]
    for old_id, _at, by in rows:
        links_remove(memory_id=by, target=old_id, kind="supersedes")
    superseded.filter(pk__in=[old_id for old_id, _at, _by in rows]).update(superseded_at=None, superseded_by=None)
    changes = [
        Change(old_id, bucket.tenant_id, bucket.pk, {"superseded_at": at, "superseded_by": by}, {"by": None})
        for old_id, at, by in rows
    ]
    versions_record(kind=VersionKind.SUPERSEDED, changes=changes)
    return len(rows)
