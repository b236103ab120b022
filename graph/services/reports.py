"""What a graph job did."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class GraphReport:
    memories: int = 0
    # Memories extracted again because a name they use was learned meanwhile (a full name, a
    # relative's name).
    reread: int = 0
    entities: int = 0
    edges: int = 0
    superseded: int = 0
    skipped: str | None = None
    errors: list[str] = field(default_factory=list)
    # Memories the extractor failed on, recorded in enrichment_failures (stage "graph").
    failures_recorded: int = 0
    # Memories a pending pass picked (graph_extract_pending): as many as it asked for means more may wait.
    selected: int = 0
