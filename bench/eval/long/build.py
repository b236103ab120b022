"""Assemble bench/eval/long/sessions.json from the hand-written sources in bench/eval/long/src/.

One source file holds one conversation: a user working with an assistant over several sessions.
Messages span many lines (code, logs, lists), so the markup is line-based and a marker is a whole
line that nothing in a message looks like:

    # L01 | Tomás Ferreira | coding: intermittent 502s in an order service
    === 2025-02-03T09:14:00Z             <- a session and its date (UTC)
    --- U #pool                          <- a user message, labelled so a question can cite it
    text of the message, any number of lines (blank lines inside are kept)
    --- A                                <- an assistant message (a label is optional)
    ...
    === questions                        <- everything after this is questions
    @asked 2025-05-01T10:00:00Z          <- asked_at of the questions below
    Q single | question text | label1, label2
    Q update | question about a changed fact | new-label | old-label

A question's fields are its category, its text, the labels of *all* the messages needed to
answer it, and (``update`` only, optional) the labels of the superseded messages, which must not
be evidence. Lines starting with ``%%`` are notes for the author and are dropped everywhere.
Leading and trailing blank lines of a message are dropped.

Ids: sessions ``L01-s1``, messages ``L01-s1-m01`` (numbered within the session), questions
``L01-q01``.

    python bench/eval/long/build.py            # writes bench/eval/long/sessions.json
    python bench/eval/long/build.py --check    # exits 1 if the JSON on disk is out of date
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# The scripts of both sets share bench/eval/setkit.py.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from setkit import SourceError, build_main

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"
OUT = HERE / "sessions.json"

CATEGORIES = ("single", "multi", "instruction", "temporal", "update")

DESCRIPTION = (
    "Engram long-session retrieval evaluation, written by hand for this project: each conversation is "
    "one user working with an AI assistant over several sessions spread across weeks or months on real "
    "work (debugging, a migration, planning, homework, writing, data analysis, a job search, training). "
    "One message is one memory; assistant messages are written at realistic length (a few past the "
    "API's 20,000-character limit). Questions are asked after the last session and list the ids of "
    "every message needed to answer them. Categories: single (one message), multi (several messages: "
    "order, summaries, counts, comparisons), instruction (instructions and preferences stated long "
    "before), temporal (when, or what was true at a date), update (a changed fact: the latest value is "
    "the evidence). All people, companies and events are invented."
)

CONV_RE = re.compile(r"^#\s+(L\d\d)\s*\|\s*(.+?)\s*\|\s*(.+?)\s*$")
SESSION_RE = re.compile(r"^===\s+(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)\s*$")
QUESTIONS_RE = re.compile(r"^===\s+questions\s*$")
MESSAGE_RE = re.compile(r"^---\s+([UA])(?:\s+#([A-Za-z0-9_-]+))?\s*$")
QUESTION_RE = re.compile(r"^Q\s+([a-z]+)\s*\|\s*(.+?)\s*\|\s*([^|]+?)\s*(?:\|\s*([^|]+?)\s*)?$")


def _labels(refs: str, labels: dict[str, str], where: str) -> list[str]:
    out = []
    for ref in (r.strip() for r in refs.split(",")):
        if ref not in labels:
            raise SourceError(f"{where}: unknown label {ref!r}")
        if labels[ref] in out:
            raise SourceError(f"{where}: label {ref!r} given twice")
        out.append(labels[ref])
    return out


def parse_source(path: Path) -> tuple[dict, list[dict]]:
    conversation: dict | None = None
    labels: dict[str, str] = {}
    questions: list[dict] = []
    session: dict | None = None
    body: list[str] | None = None  # lines of the message being read
    in_questions = False
    asked_at: str | None = None

    def close_message() -> None:
        nonlocal body
        if body is not None and session is not None:
            text = "\n".join(body).strip("\n")
            if not text.strip():
                raise SourceError(f"{path.name}: empty message {session['messages'][-1]['id']}")
            session["messages"][-1]["content"] = text
        body = None

    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        where = f"{path.name}:{lineno}"
        if raw.startswith("%%"):
            continue
        line = raw.rstrip()
        if conversation is None:
            if not line.strip():
                continue
            if m := CONV_RE.match(line):
                conversation = {"id": m.group(1), "user_name": m.group(2), "topic": m.group(3), "sessions": []}
                continue
            raise SourceError(f"{where}: expected the '# LNN | Name | topic' header")
        if in_questions:
            if not line.strip():
                continue
            if line.startswith("@asked"):
                asked_at = line.split(maxsplit=1)[1].strip()
                continue
            if m := QUESTION_RE.match(line):
                category, text, refs, stale = m.groups()
                if category not in CATEGORIES:
                    raise SourceError(f"{where}: unknown category {category!r}")
                if stale and category != "update":
                    raise SourceError(f"{where}: only update questions name superseded messages")
                if not asked_at:
                    raise SourceError(f"{where}: no @asked date for this question")
                q = {
                    "id": f"{conversation['id']}-q{len(questions) + 1:02d}",
                    "conversation_id": conversation["id"],
                    "asked_at": asked_at,
                    "category": category,
                    "question": text,
                    "evidence": _labels(refs, labels, where),
                }
                if category == "update":
                    q["superseded"] = _labels(stale, labels, where) if stale else []
                questions.append(q)
                continue
            raise SourceError(f"{where}: cannot parse question line: {raw[:80]!r}")
        if m := SESSION_RE.match(line):
            close_message()
            n = len(conversation["sessions"]) + 1
            session = {"id": f"{conversation['id']}-s{n}", "date": m.group(1), "messages": []}
            conversation["sessions"].append(session)
            continue
        if QUESTIONS_RE.match(line):
            close_message()
            in_questions = True
            continue
        if m := MESSAGE_RE.match(line):
            close_message()
            if session is None:
                raise SourceError(f"{where}: message before any session")
            mid = f"{session['id']}-m{len(session['messages']) + 1:02d}"
            session["messages"].append({"id": mid, "role": "user" if m.group(1) == "U" else "assistant"})
            if label := m.group(2):
                if label in labels:
                    raise SourceError(f"{where}: label {label!r} used twice")
                labels[label] = mid
            body = []
            continue
        if body is None:
            if line.strip():
                raise SourceError(f"{where}: text outside a message: {raw[:80]!r}")
            continue
        body.append(line)
    close_message()
    if conversation is None:
        raise SourceError(f"{path.name}: empty source")
    return conversation, questions


def build(src: Path = SRC) -> dict:
    conversations: list[dict] = []
    questions: list[dict] = []
    for path in sorted(src.glob("L*.txt")):
        conversation, conv_questions = parse_source(path)
        conversations.append(conversation)
        questions.extend(conv_questions)
    return {"version": 1, "description": DESCRIPTION, "conversations": conversations, "questions": questions}


def main(argv: list[str] | None = None) -> int:
    return build_main(
        argv, description=__doc__.splitlines()[0], build=build, out=OUT, script="bench/eval/long/build.py"
    )


if __name__ == "__main__":
    sys.exit(main())
