"""Review pairs (near-duplicates, contradictions) after a merge absorbed one of their memories."""

from __future__ import annotations

import uuid

from django.db.models import QuerySet


def repoint_pairs(
    pairs: QuerySet, mapping: dict[uuid.UUID, uuid.UUID], *, undecided: str, decision: tuple[str, ...]
) -> int:
    """Make ``pairs`` (rows with memory_a / memory_b, stored ordered) name each absorbed memory's
    survivor (``mapping``); returns how many rows now name other memories.

    A pair that becomes a memory with itself is deleted. A pair that already exists keeps one
    row, and a decided state (``status`` other than ``undecided``, with the ``decision`` fields
    recording it) wins over an undecided one, so a pair an operator decided is never raised again.
    """
    model = pairs.model
    changed = 0
    for candidate in pairs.order_by("pk").select_for_update():
        a = mapping.get(candidate.memory_a_id, candidate.memory_a_id)
        b = mapping.get(candidate.memory_b_id, candidate.memory_b_id)
        if a == b:
            candidate.delete()
            continue
        a, b = sorted([a, b])  # uuid order == PostgreSQL's uuid order (each table's pair-order check)
        existing = model.objects.filter(memory_a_id=a, memory_b_id=b).exclude(pk=candidate.pk).first()
        if existing is not None:
            if existing.status == undecided and candidate.status != undecided:
                for name in ("status", *decision):
                    setattr(existing, name, getattr(candidate, name))
                existing.save(update_fields=["status", *decision])
            candidate.delete()
            continue
        candidate.memory_a_id, candidate.memory_b_id = a, b
        candidate.save(update_fields=["memory_a", "memory_b"])
        changed += 1
    return changed
