"""Sequence context: each memory of a run (or of a batch) gets the text of its predecessors and
its place in the sequence."""

from __future__ import annotations

import uuid
from datetime import datetime

from memories.models import Memory
from memories.services.ingest.rows import Row
from tenants.models import AgentRestriction, Bucket

CONTEXT_PREDECESSORS = 2  # how many preceding memories make a memory's context


def _previous_in_run(
    bucket: Bucket, run_id: str, before: datetime, limit: int, agents: AgentRestriction | None = None
) -> tuple[list[str], int]:
    """The contents of the last ``limit`` memories of a run written before ``before``, oldest
    first, and the position the run's next memory takes. For a writer held to ``agents`` the
    contents are of the memories it may read only: another agent's text must not become its
    memory's context (the position still counts every memory of the run)."""
    run = Memory.objects.for_bucket(bucket).filter(run_id=run_id, created_at__lt=before).order_by("-created_at", "-id")
    previous = list(run.visible_to(agents).values_list("content", "sequence_index")[:limit])
    indexes = [index for _content, index in previous]
    if agents is not None:
        indexes = list(run.values_list("sequence_index", flat=True)[:limit])
    next_index = max((index for index in indexes if index is not None), default=-1) + 1
    return [content for content, _index in previous[::-1]], next_index


def run_sequence_id(bucket: Bucket, run_id: str) -> uuid.UUID:
    """A run's sequence id: the same for every request of the run, so it continues across them."""
    return uuid.uuid5(bucket.pk, f"run:{run_id}")


def assign_context(bucket: Bucket, rows: list[Row], *, sequence: bool, agents: AgentRestriction | None = None) -> None:
    """Give each row the text of its one or two predecessors in its sequence.

    A sequence is a run (same ``run_id``, continuing across requests) or, for rows
    without a run, the request's own batch in order. ``sequence=False`` treats the
    rows as unrelated facts.

    Each row also gets its place in the sequence (``sequence_id``, ``sequence_index``): a
    run's id is derived from it and its positions continue across requests; a batch's rows
    without a run share a new id.
    """
    if not sequence:
        return
    history: dict[str | None, list[str]] = {}
    positions: dict[str | None, tuple[uuid.UUID, int]] = {}
    for row in rows:
        key = row.item.run_id
        if key not in history:
            if key is None:
                history[key], positions[key] = [], (uuid.uuid4(), 0)
            else:
                history[key], first = _previous_in_run(bucket, key, row.created_at, CONTEXT_PREDECESSORS, agents)
                positions[key] = (run_sequence_id(bucket, key), first)
        previous = history[key][-CONTEXT_PREDECESSORS:]
        if previous:
            row.context_text = "\n".join(previous)
        history[key].append(row.item.content)
        row.sequence_id, row.sequence_index = positions[key]
        positions[key] = (row.sequence_id, row.sequence_index + 1)
