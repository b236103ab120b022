"""Reads of the conflict review queue for the API (maintenance/apis.py)."""

from __future__ import annotations

from engram_site.exceptions import NotFound
from maintenance.models import ConflictCandidate
from maintenance.review import CONFLICTS
from tenants.models import Bucket
from tenants.selectors import parse_row_id


def conflict_list(*, bucket: Bucket, status: str | None = None, agents=None):
    """The bucket's pairs (of one status, if given), newest found first, with both memories;
    for an agent-limited token (``agents``), the pairs whose two memories it reads."""
    pairs = ConflictCandidate.objects.for_bucket(bucket).visible_to(agents).with_memories()
    if status:
        pairs = pairs.filter(status=status)
    return pairs.order_by(*CONFLICTS.order)


def conflict_get(*, bucket: Bucket, candidate_id, agents=None) -> ConflictCandidate:
    """One pair of ``bucket``, or NotFound (another bucket's or tenant's pair looks missing)."""
    pk = parse_row_id(candidate_id)  # beyond bigint or not in its one form: no such row
    if pk is None:
        raise NotFound("Conflict not found.")
    candidate = ConflictCandidate.objects.for_bucket(bucket).visible_to(agents).filter(pk=pk).first()
    if candidate is None:
        raise NotFound("Conflict not found.")
    return candidate
