"""Assemble bench/eval/conversations.json from the hand-written sources in bench/eval/src/.

Each source file holds one conversation in a small line format, so that turns can be written
as prose and questions can point at turns by a label instead of a hand-counted index:

    # c01 | Maya Okafor
    ## 2023-02-11T20:15:00Z              <- a session and its start time (UTC)
    U: text of a user turn
    A#label: text of an assistant turn, labelled so a question can cite it
    @asked 2024-09-15T18:00:00Z          <- default asked_at for the questions below
    Q single-hop | question text | label1, label2
    Q temporal @2024-10-01T09:00:00Z | question with its own asked_at | label

Lines starting with ``//`` and blank lines are ignored. Session ids become ``c01-s1``, turn ids
``c01-s1-t01``; question ids are numbered globally in file order (``q001`` …).

    python bench/eval/build.py            # writes bench/eval/conversations.json
    python bench/eval/build.py --check    # exits 1 if the JSON on disk is out of date
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from setkit import SourceError, build_main

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"
OUT = HERE / "conversations.json"

DESCRIPTION = (
    "Engram conversational-memory retrieval evaluation, written by hand for this project. "
    "12 fictional users each talk to an AI assistant over 4-6 sessions spread across months; "
    "questions are asked after the last session and list the ids of every turn needed to answer them. "
    "Question types: single-hop, multi-hop, temporal, changed-fact, preference, paraphrase. "
    "All people, places of work and events are invented."
)

TURN_RE = re.compile(r"^(U|A)(?:#([A-Za-z0-9_-]+))?:\s*(.+)$")
SESSION_RE = re.compile(r"^##\s*(\S+)\s*$")
CONV_RE = re.compile(r"^#\s*(c\d\d)\s*\|\s*(.+?)\s*$")
QUESTION_RE = re.compile(r"^Q\s+([a-z-]+)(?:\s+@(\S+))?\s*\|\s*(.+?)\s*\|\s*(.+?)\s*$")


def parse_source(path: Path) -> tuple[dict, list[dict]]:
    conversation: dict | None = None
    labels: dict[str, str] = {}
    questions: list[dict] = []
    asked_at: str | None = None
    session: dict | None = None
    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        where = f"{path.name}:{lineno}"
        if not line or line.startswith("//"):
            continue
        if m := CONV_RE.match(line):
            conversation = {"id": m.group(1), "user_name": m.group(2), "sessions": []}
            continue
        if conversation is None:
            raise SourceError(f"{where}: content before the '# cNN | Name' header")
        if m := SESSION_RE.match(line):
            n = len(conversation["sessions"]) + 1
            session = {"id": f"{conversation['id']}-s{n}", "started_at": m.group(1), "turns": []}
            conversation["sessions"].append(session)
            continue
        if m := TURN_RE.match(line):
            if session is None:
                raise SourceError(f"{where}: turn before any session")
            role = "user" if m.group(1) == "U" else "assistant"
            turn_id = f"{session['id']}-t{len(session['turns']) + 1:02d}"
            session["turns"].append({"id": turn_id, "role": role, "content": m.group(3)})
            if label := m.group(2):
                if label in labels:
                    raise SourceError(f"{where}: label {label!r} used twice")
                labels[label] = turn_id
            continue
        if line.startswith("@asked"):
            asked_at = line.split(maxsplit=1)[1]
            continue
        if m := QUESTION_RE.match(line):
            qtype, own_asked, text, refs = m.groups()
            evidence = []
            for ref in (r.strip() for r in refs.split(",")):
                if ref not in labels:
                    raise SourceError(f"{where}: unknown label {ref!r}")
                evidence.append(labels[ref])
            when = own_asked or asked_at
            if not when:
                raise SourceError(f"{where}: no @asked date for this question")
            questions.append(
                {
                    "conversation_id": conversation["id"],
                    "asked_at": when,
                    "question": text,
                    "type": qtype,
                    "evidence": evidence,
                }
            )
            continue
        raise SourceError(f"{where}: cannot parse line: {raw[:80]!r}")
    if conversation is None:
        raise SourceError(f"{path.name}: empty source")
    return conversation, questions


def build() -> dict:
    conversations: list[dict] = []
    questions: list[dict] = []
    for path in sorted(SRC.glob("c*.txt")):
        conversation, conv_questions = parse_source(path)
        conversations.append(conversation)
        questions.extend(conv_questions)
    numbered = [{"id": f"q{i:03d}", **q} for i, q in enumerate(questions, 1)]
    return {"version": 1, "description": DESCRIPTION, "conversations": conversations, "questions": numbered}


def main(argv: list[str] | None = None) -> int:
    return build_main(argv, description=__doc__.splitlines()[0], build=build, out=OUT, script="bench/eval/build.py")


if __name__ == "__main__":
    sys.exit(main())
