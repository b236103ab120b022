"""Marking memories superseded (``superseded_at``, ``superseded_by``) with their ``supersedes`` links.

The graph decides from temporal facts which memory replaced which (graph/services.py);
the rows and links change here, together.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from memories.models import Memory
from memories.services.links import links_add, links_remove
from tenants.models import Bucket


def memory_supersede(
    *, memory_id: uuid.UUID, at: datetime | None, by: uuid.UUID | None, previous_by: uuid.UUID | None
) -> None:
    """``by`` superseded ``memory_id`` at ``at`` (both None: nothing supersedes it any more).

    The successor's ``supersedes`` link follows: removed from ``previous_by`` (the successor
    recorded until now) when that changes, added to ``by``.
    """
    Memory.objects.filter(pk=memory_id).update(superseded_at=at, superseded_by=by)
    if previous_by and previous_by != by:
        links_remove(memory_id=previous_by, target=memory_id, kind="supersedes")
    if by:
        links_add(memory_id=by, links=[(memory_id, "supersedes")])


def supersessions_clear(*, bucket: Bucket) -> int:
    """Undo every supersession of ``bucket`` (a graph rebuild starts from none); returns how many."""
    superseded = Memory.objects.for_bucket(bucket).filter(superseded_by__isnull=False)
    pairs = list(superseded.values_list("id", "superseded_by"))
    for old_id, by in pairs:
        links_remove(memory_id=by, target=old_id, kind="supersedes")
    superseded.update(superseded_at=None, superseded_by=None)
    return len(pairs)
