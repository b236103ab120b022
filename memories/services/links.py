"""Adding and removing links between memories (the link fields are described in memories/links.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from django.db import transaction

from memories.links import LINKS_KEY
from memories.models import Memory


def links_add(*, memory_id: uuid.UUID, links: Iterable[tuple[uuid.UUID, str]]) -> int:
    """Add ``(target, kind)`` links to a memory; returns how many were new."""
    links = list(links)
    if not links:
        return 0
    with transaction.atomic():
        row = Memory.objects.select_for_update().filter(pk=memory_id).values("linked_memory_ids", "metadata").first()
        if row is None:
            return 0
        ids = [str(i) for i in (row["linked_memory_ids"] or [])]
        metadata = dict(row["metadata"] or {})
        entries = [e for e in (metadata.get(LINKS_KEY) or []) if isinstance(e, dict)]
        added = 0
        for target, kind in links:
            entry = {"id": str(target), "kind": kind}
            if entry not in entries:
                entries.append(entry)
                added += 1
            if str(target) not in ids:
                ids.append(str(target))
        if added:
            metadata[LINKS_KEY] = entries
            Memory.objects.filter(pk=memory_id).update(linked_memory_ids=ids, metadata=metadata)
    return added


def links_remove(*, memory_id: uuid.UUID, target: uuid.UUID, kind: str) -> None:
    """Remove one kind of link; the id leaves ``linked_memory_ids`` only when no other
    kind of link to it remains."""
    with transaction.atomic():
        row = Memory.objects.select_for_update().filter(pk=memory_id).values("linked_memory_ids", "metadata").first()
        if row is None:
            return
        metadata = dict(row["metadata"] or {})
        entries = [e for e in (metadata.get(LINKS_KEY) or []) if isinstance(e, dict)]
        kept = [e for e in entries if not (e.get("id") == str(target) and e.get("kind") == kind)]
        ids = [str(i) for i in (row["linked_memory_ids"] or [])]
        if not any(e.get("id") == str(target) for e in kept):
            ids = [i for i in ids if i != str(target)]
        if kept != entries or ids != [str(i) for i in (row["linked_memory_ids"] or [])]:
            if kept:
                metadata[LINKS_KEY] = kept
            else:
                metadata.pop(LINKS_KEY, None)
            Memory.objects.filter(pk=memory_id).update(linked_memory_ids=ids, metadata=metadata)
