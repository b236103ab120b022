"""Validate bench/eval/long/sessions.json and print its statistics.

Checks the format; that ids are unique and well formed; that session dates increase and
questions are asked after the last session; roles alternate, user first; categories are known;
evidence ids exist, belong to the question's conversation and are not repeated; an ``update``
question's superseded messages exist and are not evidence; ``multi`` questions cite several
messages. Warns about questions that copy a long word run from their evidence (questions should
be paraphrased) and about a set whose lengths drift from the target shape (user messages mostly
50–800 characters, assistant median about 1,400, about 5% over 5,000, a couple over the API's
20,000-character limit). Prints message length statistics and the question mix.

    python bench/eval/long/validate.py [path/to/sessions.json] [--strict]

Exits 1 on errors (and, with --strict, on warnings).
"""

from __future__ import annotations

import re
import statistics
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path

# The scripts of both sets share bench/eval/setkit.py.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from setkit import Report, parse_time, validate_main, word_ngrams

DEFAULT = Path(__file__).resolve().parent / "sessions.json"

CATEGORIES = ("single", "multi", "instruction", "temporal", "update")
MIN_CONVERSATIONS = 10
MIN_QUESTIONS = 250
MESSAGES_PER_CONVERSATION = (60, 300)
MIN_SPAN_DAYS = 14
API_LIMIT = 20_000  # characters per memory (memories/serializers.py MAX_CONTENT_CHARS)
COPY_RUN = 7  # a question sharing this many consecutive words with its evidence is copying it

MID_RE = re.compile(r"^(L\d\d)-s(\d+)-m(\d\d)$")


def percentile(values: list[int], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = (len(ordered) - 1) * p / 100.0
    lo = int(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def length_stats(lengths: list[int]) -> dict[str, float]:
    if not lengths:
        return {"n": 0}
    return {
        "n": len(lengths),
        "min": min(lengths),
        "p10": percentile(lengths, 10),
        "median": statistics.median(lengths),
        "mean": statistics.fmean(lengths),
        "p90": percentile(lengths, 90),
        "p95": percentile(lengths, 95),
        "max": max(lengths),
        "over_5000": sum(n > 5000 for n in lengths) / len(lengths),
        "over_limit": sum(n > API_LIMIT for n in lengths),
    }


def validate(data: object, rep: Report) -> dict:
    stats: dict = {"per_conversation": {}, "lengths": {"user": [], "assistant": []}}
    if not isinstance(data, dict):
        rep.error("top level is not an object")
        return stats
    if set(data) != {"version", "description", "conversations", "questions"}:
        rep.error(f"top-level keys are {sorted(data)}")
    if data.get("version") != 1:
        rep.error("version must be 1")

    messages: dict[str, dict] = {}
    message_conv: dict[str, str] = {}
    message_session: dict[str, str] = {}
    last_session: dict[str, datetime] = {}
    conv_ids: list[str] = []
    names: set[str] = set()
    for conv in data.get("conversations") or []:
        cid = conv.get("id")
        if set(conv) != {"id", "user_name", "topic", "sessions"}:
            rep.error(f"conversation {cid}: keys are {sorted(conv)}")
        if not isinstance(cid, str) or not re.fullmatch(r"L\d\d", cid) or cid in conv_ids:
            rep.error(f"conversation id {cid!r} is malformed or repeated")
            continue
        conv_ids.append(cid)
        if not conv.get("user_name") or conv["user_name"] in names:
            rep.error(f"conversation {cid}: user_name missing or repeated")
        names.add(conv.get("user_name"))
        first = previous = None
        count = 0
        sessions = conv.get("sessions") or []
        for n, session in enumerate(sessions, 1):
            sid = session.get("id")
            if sid != f"{cid}-s{n}":
                rep.error(f"session id {sid!r} should be {cid}-s{n}")
            if set(session) != {"id", "date", "messages"}:
                rep.error(f"session {sid}: keys are {sorted(session)}")
            when = parse_time(session.get("date"))
            if when is None:
                rep.error(f"session {sid}: date {session.get('date')!r} is not ISO 8601 UTC ending in Z")
                continue
            if previous is not None and when <= previous:
                rep.error(f"session {sid}: date is not after the previous session's")
            first = first or when
            previous = when
            session_messages = session.get("messages") or []
            if len(session_messages) < 2:
                rep.error(f"session {sid}: fewer than 2 messages")
            for i, msg in enumerate(session_messages, 1):
                mid = msg.get("id")
                if mid != f"{sid}-m{i:02d}":
                    rep.error(f"message id {mid!r} should be {sid}-m{i:02d}")
                if mid in messages:
                    rep.error(f"duplicate message id {mid}")
                if set(msg) != {"id", "role", "content"}:
                    rep.error(f"message {mid}: keys are {sorted(msg)}")
                want = "user" if i % 2 == 1 else "assistant"
                if msg.get("role") != want:
                    rep.error(f"message {mid}: role {msg.get('role')!r}, expected {want} (alternating, user first)")
                content = msg.get("content")
                if not isinstance(content, str) or not content.strip():
                    rep.error(f"message {mid}: empty content")
                    content = ""
                if msg.get("role") in stats["lengths"]:
                    stats["lengths"][msg["role"]].append(len(content))
                messages[mid] = msg
                message_conv[mid] = cid
                message_session[mid] = sid
            count += len(session_messages)
            if session_messages and session_messages[-1].get("role") != "assistant":
                rep.warn(f"session {sid}: ends on a user message")
        lo, hi = MESSAGES_PER_CONVERSATION
        if not lo <= count <= hi:
            rep.error(f"conversation {cid}: {count} messages (want {lo}-{hi})")
        span = (previous - first).days if first and previous else 0
        if span < MIN_SPAN_DAYS:
            rep.error(f"conversation {cid}: sessions span {span} days (want at least {MIN_SPAN_DAYS})")
        if previous:
            last_session[cid] = previous
        stats["per_conversation"][cid] = {
            "user": conv.get("user_name"),
            "topic": conv.get("topic"),
            "sessions": len(sessions),
            "messages": count,
            "span_days": span,
            "chars": sum(len(m.get("content") or "") for s in sessions for m in s.get("messages") or []),
            "questions": Counter(),
        }
    if len(conv_ids) < MIN_CONVERSATIONS:
        rep.error(f"{len(conv_ids)} conversations (want at least {MIN_CONVERSATIONS})")

    categories: Counter[str] = Counter()
    evidence_sizes: Counter[int] = Counter()
    evidence_roles: Counter[str] = Counter()
    cross_session = 0
    qids: set[str] = set()
    texts: set[str] = set()
    questions = data.get("questions") or []
    for q in questions:
        qid = q.get("id")
        cid = q.get("conversation_id")
        category = q.get("category")
        keys = {"id", "conversation_id", "asked_at", "category", "question", "evidence"}
        if category == "update":
            keys.add("superseded")
        if set(q) != keys:
            rep.error(f"question {qid}: keys are {sorted(q)}")
        if not isinstance(qid, str) or not re.fullmatch(rf"{cid}-q\d\d", qid) or qid in qids:
            rep.error(f"question id {qid!r} is malformed or repeated")
        qids.add(qid)
        text = (q.get("question") or "").strip()
        if not text or text.lower() in texts:
            rep.error(f"question {qid}: empty or repeated text")
        texts.add(text.lower())
        if cid not in conv_ids:
            rep.error(f"question {qid}: unknown conversation {cid!r}")
            continue
        if category not in CATEGORIES:
            rep.error(f"question {qid}: unknown category {category!r}")
        categories[category] += 1
        stats["per_conversation"][cid]["questions"][category] += 1
        asked = parse_time(q.get("asked_at"))
        if asked is None or asked <= last_session.get(cid, asked):
            rep.error(f"question {qid}: asked_at missing, malformed or not after the last session")
        evidence = q.get("evidence")
        if not isinstance(evidence, list) or not evidence:
            rep.error(f"question {qid}: evidence must be a non-empty list")
            continue
        if len(set(evidence)) != len(evidence):
            rep.error(f"question {qid}: repeated evidence id")
        present = []
        for mid in evidence:
            if mid not in messages or message_conv[mid] != cid:
                rep.error(f"question {qid}: evidence {mid!r} is not a message of {cid}")
                continue
            present.append(mid)
            evidence_roles[messages[mid]["role"]] += 1
        evidence_sizes[len(evidence)] += 1
        if len({message_session[m] for m in present}) > 1:
            cross_session += 1
        if category == "multi" and len(present) < 2:
            rep.error(f"question {qid}: multi with fewer than two evidence messages")
        for mid in q.get("superseded") or []:
            if mid not in messages or message_conv[mid] != cid:
                rep.error(f"question {qid}: superseded {mid!r} is not a message of {cid}")
            elif mid in evidence:
                rep.error(f"question {qid}: {mid} is both evidence and superseded")
        for mid in present:
            copied = word_ngrams(text, COPY_RUN) & word_ngrams(messages[mid]["content"], COPY_RUN)
            if copied:
                rep.warn(f"question {qid}: copies a {COPY_RUN}-word run from {mid}: {' '.join(sorted(copied)[0])!r}")
    if len(questions) < MIN_QUESTIONS:
        rep.error(f"{len(questions)} questions (want at least {MIN_QUESTIONS})")
    missing = [c for c in CATEGORIES if not categories.get(c)]
    if missing:
        rep.error(f"no questions of categories {missing}")

    user = length_stats(stats["lengths"]["user"])
    assistant = length_stats(stats["lengths"]["assistant"])
    if user.get("n"):
        in_band = sum(50 <= n <= 800 for n in stats["lengths"]["user"]) / user["n"]
        stats["user_in_band"] = in_band
        if in_band < 0.6:
            rep.warn(f"only {in_band:.0%} of user messages are 50-800 characters")
    if assistant.get("n"):
        if not 1100 <= assistant["median"] <= 1800:
            rep.warn(f"assistant median {assistant['median']:.0f} characters (target about 1,400)")
        if assistant["over_5000"] < 0.03:
            rep.warn(f"{assistant['over_5000']:.1%} of assistant messages over 5,000 characters (target about 5%)")
    over = sum(n > API_LIMIT for role in ("user", "assistant") for n in stats["lengths"][role])
    if over < 2:
        rep.warn(f"{over} message(s) over {API_LIMIT:,} characters (want a couple, split by the harness)")
    stats.update(
        conversations=len(conv_ids),
        sessions=sum(r["sessions"] for r in stats["per_conversation"].values()),
        messages=len(messages),
        questions=len(questions),
        categories=categories,
        evidence_sizes=evidence_sizes,
        evidence_roles=evidence_roles,
        cross_session=cross_session,
        user=user,
        assistant=assistant,
        all=length_stats(stats["lengths"]["user"] + stats["lengths"]["assistant"]),
    )
    return stats


def _length_row(name: str, s: dict) -> str:
    if not s.get("n"):
        return f"{name:<10} (none)"
    return (
        f"{name:<10}{s['n']:>6}{s['min']:>7}{s['p10']:>8.0f}{s['median']:>8.0f}{s['mean']:>8.0f}{s['p90']:>8.0f}"
        f"{s['p95']:>8.0f}{s['max']:>8}{s['over_5000']:>9.1%}{s['over_limit']:>7}"
    )


def print_summary(stats: dict, rep: Report) -> None:
    if "messages" in stats:
        print(
            f"conversations: {stats['conversations']}  sessions: {stats['sessions']}  messages: {stats['messages']}  "
            f"questions: {stats['questions']}"
        )
        print()
        print("message length in characters")
        print(
            f"{'role':<10}{'n':>6}{'min':>7}{'p10':>8}{'median':>8}{'mean':>8}{'p90':>8}{'p95':>8}{'max':>8}"
            f"{'>5000':>9}{'>20k':>7}"
        )
        for role in ("user", "assistant", "all"):
            print(_length_row(role, stats[role]))
        if "user_in_band" in stats:
            print(f"user messages of 50-800 characters: {stats['user_in_band']:.0%}")
        print()
        short = {"single": "sgl", "multi": "mul", "instruction": "ins", "temporal": "tmp", "update": "upd"}
        header = " ".join(f"{short[c]:>4}" for c in CATEGORIES)
        print(f"{'conv':<5}{'user':<20}{'sess':>5}{'msgs':>5}{'days':>5}{'k chars':>8}{'qs':>4}  {header}  topic")
        for cid, row in stats["per_conversation"].items():
            by = " ".join(f"{row['questions'].get(c, 0):>4}" for c in CATEGORIES)
            print(
                f"{cid:<5}{row['user'][:19]:<20}{row['sessions']:>5}{row['messages']:>5}{row['span_days']:>5}"
                f"{row['chars'] / 1000:>8.0f}{sum(row['questions'].values()):>4}  {by}  {row['topic']}"
            )
        total = stats["questions"] or 1
        print()
        print("questions by category: " + ", ".join(
            f"{c} {stats['categories'].get(c, 0)} ({stats['categories'].get(c, 0) / total:.0%})" for c in CATEGORIES
        ))  # fmt: skip
        sizes = ", ".join(f"{k}: {v}" for k, v in sorted(stats["evidence_sizes"].items()))
        roles = ", ".join(f"{k} {v}" for k, v in sorted(stats["evidence_roles"].items()))
        print(f"evidence messages per question: {sizes}")
        print(f"evidence by role: {roles}; questions citing several sessions: {stats['cross_session']}")


def main(argv: list[str] | None = None) -> int:
    return validate_main(
        argv,
        description="Validate the long-session evaluation set.",
        default=DEFAULT,
        validate=validate,
        print_summary=print_summary,
    )


if __name__ == "__main__":
    sys.exit(main())
