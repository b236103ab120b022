"""The ranking settings a bucket learned from its feedback (memories.services.ranking_learning),
as the search reads them: one statement by the bucket's unique index (``learned_rankings_bucket``),
only for a search of one bucket — a search across buckets ranks them together, and no one
bucket's lesson is theirs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from engram_site import tracing
from memories.models import LearnedRanking
from tenants.models import Bucket


@dataclass(frozen=True)
class Learned:
    settings: dict
    learned_at: datetime
    held_before: float
    held_after: float

    def as_explain(self) -> dict:
        """What ``explain`` says of it: the settings and the held-back scores that adopted them.
        (Knobs an operator or the request set win over these: the hit's ranking used theirs.)"""
        return {
            "settings": self.settings,
            "learned_at": self.learned_at.isoformat(),
            "held_back_score": {"defaults": round(self.held_before, 4), "learned": round(self.held_after, 4)},
        }


@tracing.traced("engram.search.learned")
def learned_for(bucket: Bucket) -> Learned | None:
    """The bucket's adopted learned settings, or None (none learned, or none beat the defaults)."""
    row = (
        LearnedRanking.objects.for_bucket(bucket)
        .filter(adopted=True)
        .values_list("settings", "learned_at", "held_before", "held_after")
        .first()
    )
    if row is None or not row[0]:
        return None
    return Learned(settings=row[0], learned_at=row[1], held_before=row[2], held_after=row[3])
