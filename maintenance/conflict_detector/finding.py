"""What the detector answers when it finds a contradiction."""

from __future__ import annotations

from dataclasses import dataclass

from maintenance.conflict_detector.subjects import Subject


@dataclass(frozen=True)
class Finding:
    code: str  # the cue: one of conflict_detector.CUES
    reason: str  # a short sentence for the review queue
    score: float  # 0..1, how sure the cue is


@dataclass(frozen=True)
class Fact:
    """A value a statement gives for something that holds one value at a time (facts.py)."""

    subject: Subject
    attribute: tuple  # what the value is of: ("age",), ("status",), ("quantity", key…), ("open_days",)…
    value: object
    shown: str  # the value as a person reads it
    approximate: bool = False
    exhaustive: bool = False  # a schedule that names every day it is open ("Monday to Friday", "only Saturdays")
