"""What a distiller takes (a :class:`Unit`: one chunk) and gives back (statements), and the
interface both distillers implement."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

RULES_VERSION = "rules-v1"
MAX_STATEMENT_CHARS = 1_000


@dataclass(frozen=True)
class Unit:
    """What a distiller sees of one chunk."""

    kind: str  # "document" | "conversation"
    text: str
    title: str = ""
    heading: str = ""  # documents: the heading path, "Section > Subsection"
    role: str | None = None  # conversations: "user" | "assistant"
    # Who "I" is in this chunk; None keeps first person (attributed_to still says who spoke).
    speaker: str | None = None
    # Conversations: the preceding message, for short answers to its question.
    previous_text: str | None = None
    previous_role: str | None = None


@dataclass(frozen=True)
class Statement:
    text: str
    # The statement also draws on the previous chunk (a short answer folded with its question).
    cites_previous: bool = False


@dataclass
class DistillResult:
    statements: list[Statement] = field(default_factory=list)
    dropped: int = 0  # sentences left out (filler, empty questions)
    by: str = RULES_VERSION


class Distiller(Protocol):
    name: str

    def distill(self, unit: Unit) -> DistillResult: ...
