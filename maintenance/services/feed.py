"""The change feed's upkeep job (the ``memory_events`` schedule)."""

from __future__ import annotations

from datetime import datetime

from engram_site.jobs.runner import JobRecorder
from memories.services.feed_writer import events_expire, events_trim


def memory_events_maintain(*, recorder: JobRecorder, now: datetime | None = None) -> dict:
    """The change feed's job: record ``expired`` for memories whose expiry passed since the last
    run (the schedule's interval is the latency), delete events past ENGRAM_EVENTS_RETENTION_DAYS."""
    counts = {"expired": events_expire(now=now), "trimmed": events_trim(now=now)}
    recorder.add(**counts)
    return counts
