"""Where a memory came from, for its detail page and API answer.

The sources app knows which document chunk stated a memory; it sits above memories and
registers its lookup here in SourcesConfig.ready (memories does not import it).
"""

from __future__ import annotations

from collections.abc import Callable

from memories.models import Memory
from tenants.models import AgentRestriction

_lookup: Callable[..., dict | None] | None = None


def register_source_lookup(lookup: Callable[..., dict | None]) -> None:
    """``lookup(memory=..., agents=...)`` returns ``{source_id, chunk_id, kind, title}`` or None
    (``agents``: of a source a token held to agents may read)."""
    global _lookup
    _lookup = lookup


def memory_source(*, memory: Memory, agents: AgentRestriction | None = None) -> dict | None:
    return _lookup(memory=memory, agents=agents) if _lookup is not None else None
