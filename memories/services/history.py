"""A memory's history: one ``memory_versions`` row per change, written by the gateway function
that makes the change, in its transaction.

A version says what kind of change it was, the fields it changed with their values *before*
it (``previous``), what else the change needs to be understood (``details``: the memory a
merge went into, the one that superseded it) and who made it: a token, an operator, or
Engram itself (the graph, the classifiers, the purge job). The memory's present values are
on its row; walking the versions newest first gives every earlier state.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from audit.services import Actor
from memories.models import MemoryVersion, VersionKind
from memories.services.feed_writer import events_from_versions

# Who changed a memory when no request did.
ENGRAM = Actor.system("engram")


@dataclass(frozen=True)
class Change:
    """One memory's change, for :func:`versions_record`."""

    memory_id: uuid.UUID
    tenant_id: uuid.UUID
    bucket_id: uuid.UUID
    previous: Mapping
    details: Mapping | None = None


def _actor_columns(actor: Actor | None) -> dict:
    actor = actor or ENGRAM
    return {"actor_kind": str(actor.kind), "actor_id": actor.id[:64], "actor_label": actor.label[:200]}


def versions_record(*, kind: VersionKind | str, changes: Iterable[Change], actor: Actor | None = None) -> int:
    """Record one version of ``kind`` per change, and its change-feed event (memories/services/feed_writer.py),
    in the caller's transaction; returns how many versions."""
    who = _actor_columns(actor)
    changes = list(changes)
    rows = [
        MemoryVersion(
            memory_id=c.memory_id,
            tenant_id=c.tenant_id,
            bucket_id=c.bucket_id,
            kind=kind,
            previous=dict(c.previous),
            details=dict(c.details or {}),
            **who,
        )  # fmt: skip
        for c in changes
    ]
    MemoryVersion.objects.bulk_create(rows, batch_size=1000)
    events_from_versions(kind=kind, changes=changes)
    return len(rows)


def version_record(*, memory, kind: VersionKind | str, previous: Mapping, actor: Actor | None = None,
                   details: Mapping | None = None) -> None:  # fmt: skip
    """Record one change of ``memory`` (a Memory, or anything with its id, tenant_id and bucket_id)."""
    change = Change(memory.pk, memory.tenant_id, memory.bucket_id, previous, details)
    versions_record(kind=kind, changes=[change], actor=actor)
