"""Validate bench/eval/conversations.json and print a summary.

Checks the format, id uniqueness, that evidence ids exist and belong to the question's
conversation, that session dates increase and questions are asked after the last session,
session and turn counts, role alternation, and the question-type mix. Paraphrase questions
are checked for shared content words with their evidence, and every question for long
word runs copied from its evidence.

    python bench/eval/validate.py [path/to/conversations.json] [--strict]

Exits 1 on errors (and, with --strict, on warnings).
"""

from __future__ import annotations

import re
import sys
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path

from setkit import Report, parse_time, validate_main, word_ngrams

DEFAULT = Path(__file__).resolve().parent / "conversations.json"

TYPES = {
    "single-hop": 0.30,
    "multi-hop": 0.15,
    "temporal": 0.20,
    "changed-fact": 0.15,
    "preference": 0.10,
    "paraphrase": 0.10,
}
SESSIONS_PER_CONVERSATION = (4, 6)
TURNS_PER_SESSION = (10, 20)
SPAN_MONTHS = (6, 24)
TURN_ID_RE = re.compile(r"^(c\d\d)-s(\d+)-t(\d\d)$")

STOPWORDS = set(
    """
    a about above after again against all am an and any are as at be because been before being below between both
    but by can could did do does doing done down during each few for from further get got had has have having he her
    here hers herself him himself his how i if in into is it its itself just me more most my myself no nor not now of
    off on once only or other our ours ourselves out over own same she should so some such than that the their theirs
    them themselves then there these they this those through to too under until up very was we were what when where
    which while who whom why will with would you your yours yourself yourselves im ive id dont didnt doesnt isnt wasnt
    thats whats its lol ok okay yeah yes oh also really still already much many one ever again
    tell remind know remember say said go going went us back way well use used thing things like
    """.split()
)


def stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s", "ly"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def content_words(text: str) -> set[str]:
    words = re.findall(r"[a-z0-9]+", text.lower().replace("'", ""))
    return {stem(w) for w in words if w not in STOPWORDS and len(w) > 2}


def months_between(a: datetime, b: datetime) -> float:
    return (b - a).days / 30.44


def validate(data: object, rep: Report) -> dict:
    stats: dict = {}
    if not isinstance(data, dict):
        rep.error("top level is not an object")
        return stats
    if set(data) != {"version", "description", "conversations", "questions"}:
        rep.error(f"top-level keys are {sorted(data)}")
    if data.get("version") != 1:
        rep.error("version must be 1")
    if not isinstance(data.get("description"), str) or not data.get("description"):
        rep.error("description must be a non-empty string")

    turns: dict[str, dict] = {}
    turn_conversation: dict[str, str] = {}
    turn_session: dict[str, str] = {}
    session_start: dict[str, datetime] = {}
    last_session: dict[str, datetime] = {}
    conv_ids: set[str] = set()
    user_names: set[str] = set()
    session_ids: set[str] = set()
    stats["sessions"] = 0
    stats["turns"] = 0
    stats["words"] = 0
    stats["per_conversation"] = {}

    conversations = data.get("conversations") or []
    for conv in conversations:
        cid = conv.get("id")
        if set(conv) != {"id", "user_name", "sessions"}:
            rep.error(f"conversation {cid}: keys are {sorted(conv)}")
        if not isinstance(cid, str) or not re.fullmatch(r"c\d\d", cid):
            rep.error(f"conversation id {cid!r} is not like c01")
        if cid in conv_ids:
            rep.error(f"duplicate conversation id {cid}")
        conv_ids.add(cid)
        name = conv.get("user_name")
        if not name or name in user_names:
            rep.error(f"conversation {cid}: user_name missing or repeated ({name!r})")
        user_names.add(name)
        sessions = conv.get("sessions") or []
        lo, hi = SESSIONS_PER_CONVERSATION
        if not lo <= len(sessions) <= hi:
            rep.error(f"conversation {cid}: {len(sessions)} sessions (want {lo}-{hi})")
        previous: datetime | None = None
        first: datetime | None = None
        conv_turns = 0
        for n, session in enumerate(sessions, 1):
            sid = session.get("id")
            if set(session) != {"id", "started_at", "turns"}:
                rep.error(f"session {sid}: keys are {sorted(session)}")
            if sid != f"{cid}-s{n}":
                rep.error(f"session id {sid!r} should be {cid}-s{n}")
            if sid in session_ids:
                rep.error(f"duplicate session id {sid}")
            session_ids.add(sid)
            start = parse_time(session.get("started_at"))
            if start is None:
                rep.error(f"session {sid}: started_at {session.get('started_at')!r} is not ISO 8601 UTC ending in Z")
                continue
            if previous is not None and start <= previous:
                rep.error(f"session {sid}: started_at is not after the previous session")
            previous = start
            first = first or start
            session_start[sid] = start
            session_turns = session.get("turns") or []
            lo, hi = TURNS_PER_SESSION
            if not lo <= len(session_turns) <= hi:
                rep.error(f"session {sid}: {len(session_turns)} turns (want {lo}-{hi})")
            for i, turn in enumerate(session_turns, 1):
                tid = turn.get("id")
                if set(turn) != {"id", "role", "content"}:
                    rep.error(f"turn {tid}: keys are {sorted(turn)}")
                if tid != f"{sid}-t{i:02d}":
                    rep.error(f"turn id {tid!r} should be {sid}-t{i:02d}")
                if tid in turns:
                    rep.error(f"duplicate turn id {tid}")
                want_role = "user" if i % 2 == 1 else "assistant"
                if turn.get("role") != want_role:
                    rep.error(f"turn {tid}: role {turn.get('role')!r}, expected {want_role} (alternating, user first)")
                content = turn.get("content")
                if not isinstance(content, str) or not content.strip():
                    rep.error(f"turn {tid}: empty content")
                    content = ""
                turns[tid] = turn
                turn_conversation[tid] = cid
                turn_session[tid] = sid
                stats["words"] += len(content.split())
            conv_turns += len(session_turns)
        if first and previous:
            last_session[cid] = previous
            span = months_between(first, previous)
            lo, hi = SPAN_MONTHS
            if not lo <= span <= hi + 0.5:
                rep.error(f"conversation {cid}: sessions span {span:.1f} months (want {lo}-{hi})")
        stats["sessions"] += len(sessions)
        stats["turns"] += conv_turns
        stats["per_conversation"][cid] = {
            "user": name,
            "sessions": len(sessions),
            "turns": conv_turns,
            "span_months": round(months_between(first, previous), 1) if first and previous else None,
            "questions": 0,
        }
    stats["conversations"] = len(conversations)

    question_ids: set[str] = set()
    question_texts: set[str] = set()
    type_counts: Counter[str] = Counter()
    evidence_sizes: Counter[int] = Counter()
    evidence_roles: Counter[str] = Counter()
    cross_session = 0
    type_by_conv: dict[str, Counter[str]] = defaultdict(Counter)
    questions = data.get("questions") or []
    for q in questions:
        qid = q.get("id")
        expected_keys = {"id", "conversation_id", "asked_at", "question", "type", "evidence"}
        if set(q) != expected_keys:
            rep.error(f"question {qid}: keys are {sorted(q)}")
        if not isinstance(qid, str) or not re.fullmatch(r"q\d{3,}", qid):
            rep.error(f"question id {qid!r} is not like q001")
        if qid in question_ids:
            rep.error(f"duplicate question id {qid}")
        question_ids.add(qid)
        text = q.get("question") or ""
        if not text.strip():
            rep.error(f"question {qid}: empty text")
        if text.lower() in question_texts:
            rep.error(f"question {qid}: duplicate text {text!r}")
        question_texts.add(text.lower())
        cid = q.get("conversation_id")
        if cid not in conv_ids:
            rep.error(f"question {qid}: unknown conversation {cid!r}")
            continue
        stats["per_conversation"][cid]["questions"] += 1
        qtype = q.get("type")
        if qtype not in TYPES:
            rep.error(f"question {qid}: unknown type {qtype!r}")
        type_counts[qtype] += 1
        type_by_conv[cid][qtype] += 1
        asked = parse_time(q.get("asked_at"))
        if asked is None:
            rep.error(f"question {qid}: asked_at {q.get('asked_at')!r} is not ISO 8601 UTC ending in Z")
        elif cid in last_session and asked <= last_session[cid]:
            rep.error(f"question {qid}: asked_at is not after the last session of {cid}")
        evidence = q.get("evidence")
        if not isinstance(evidence, list) or not evidence:
            rep.error(f"question {qid}: evidence must be a non-empty list")
            continue
        if len(set(evidence)) != len(evidence):
            rep.error(f"question {qid}: repeated evidence id")
        evidence_sizes[len(evidence)] += 1
        sessions_used = set()
        for tid in evidence:
            if tid not in turns:
                rep.error(f"question {qid}: evidence {tid!r} does not exist")
                continue
            if turn_conversation[tid] != cid:
                rep.error(f"question {qid}: evidence {tid} belongs to another conversation")
            evidence_roles[turns[tid]["role"]] += 1
            sessions_used.add(turn_session[tid])
        if len(sessions_used) > 1:
            cross_session += 1
        present = [tid for tid in evidence if tid in turns]
        if qtype == "multi-hop" and len(present) < 2:
            rep.warn(f"question {qid}: multi-hop with a single evidence turn")
        if qtype == "paraphrase":
            shared = content_words(text) & set().union(*(content_words(turns[t]["content"]) for t in present))
            if shared:
                rep.warn(f"question {qid}: paraphrase shares content words with its evidence: {sorted(shared)}")
        for tid in present:
            copied = word_ngrams(text, 6) & word_ngrams(turns[tid]["content"], 6)
            if copied:
                rep.warn(f"question {qid}: copies a 6-word run from {tid}: {' '.join(next(iter(copied)))!r}")

    stats["questions"] = len(questions)
    stats["types"] = type_counts
    stats["type_by_conversation"] = type_by_conv
    stats["evidence_sizes"] = evidence_sizes
    stats["evidence_roles"] = evidence_roles
    stats["cross_session"] = cross_session
    return stats


def print_summary(stats: dict, rep: Report) -> None:
    if not stats:
        return
    total_q = stats["questions"] or 1
    print(
        f"conversations: {stats['conversations']}  sessions: {stats['sessions']}  turns: {stats['turns']}  "
        f"words: {stats['words']}  questions: {stats['questions']}"
    )
    print()
    print(f"{'type':<14}{'count':>6}{'share':>8}{'target':>8}")
    for qtype, target in TYPES.items():
        count = stats["types"].get(qtype, 0)
        print(f"{qtype:<14}{count:>6}{count / total_q:>8.0%}{target:>8.0%}")
    print()
    short = {"single-hop": "sh", "multi-hop": "mh", "temporal": "tm", "changed-fact": "cf", "preference": "pf"}
    short["paraphrase"] = "pp"
    header = "  ".join(f"{short[t]:>3}" for t in TYPES)
    print(f"{'conv':<5}{'user':<22}{'sess':>5}{'turns':>6}{'months':>7}{'qs':>4}   {header}")
    for cid, row in stats["per_conversation"].items():
        by_type = "  ".join(f"{stats['type_by_conversation'][cid].get(t, 0):>3}" for t in TYPES)
        print(
            f"{cid:<5}{row['user']:<22}{row['sessions']:>5}{row['turns']:>6}{row['span_months']:>7}"
            f"{row['questions']:>4}   {by_type}"
        )
    print()
    sizes = ", ".join(f"{k} turn(s): {v}" for k, v in sorted(stats["evidence_sizes"].items()))
    roles = ", ".join(f"{k}: {v}" for k, v in sorted(stats["evidence_roles"].items()))
    print(f"evidence per question: {sizes}")
    print(f"evidence turns by role: {roles}; questions with evidence from several sessions: {stats['cross_session']}")


def main(argv: list[str] | None = None) -> int:
    return validate_main(
        argv,
        description="Validate the retrieval evaluation set.",
        default=DEFAULT,
        validate=validate,
        print_summary=print_summary,
    )


if __name__ == "__main__":
    sys.exit(main())
