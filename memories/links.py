"""Links between memories: ``linked_memory_ids`` (seed 000: a JSON array of ids, GIN-indexed
for "who links to X") plus each link's kind in ``metadata["_engram_links"]``
(``[{"id": ..., "kind": "supersedes" | "refines" | "cites"}]``).

Keys of ``metadata`` starting with ``_engram`` are reserved for Engram; the API refuses
them from clients, so a client's own metadata is never overwritten. Links are written by
:mod:`memories.services.links`.
"""

from __future__ import annotations

from memories.models import Memory

LINKS_KEY = "_engram_links"
RESERVED_PREFIX = "_engram"
KINDS = ("supersedes", "refines", "cites")


def link_kinds(memory: Memory) -> list[dict]:
    return [e for e in ((memory.metadata or {}).get(LINKS_KEY) or []) if isinstance(e, dict)]
