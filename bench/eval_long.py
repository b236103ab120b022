"""Retrieval quality on long user–assistant working sessions, through Engram's HTTP API.

The set is ``bench/eval/long/sessions.json`` (hand-written, see bench/eval/long/README.md): each
conversation is one user working with an assistant over several sessions, with messages at
realistic length: short-to-medium user messages, long assistant ones, a few past the API's
20,000-character limit. The protocol is the one a client with no special knowledge would follow:

- each conversation is one bucket; every message is one memory, written through
  ``POST /buckets/{id}/memories``, one request per session, messages in order, each with
  ``content`` = ``"User: <text>"`` or ``"Assistant: <text>"``, ``created_at`` = the session's date,
  ``metadata`` = ``{"message_id": ...}`` and nothing else (no ``attributed_to``, no ``run_id``);
- a message longer than 20,000 characters is split the way a client would: into consecutive
  parts at paragraph breaks (else line breaks, else anywhere), each part at most 20,000
  characters *with* its role prefix, every part keeping the message id in its metadata (plus
  ``part`` and ``parts``);
- every question is one ``POST /buckets/{id}/search`` with ``{"query": <question>, "limit": 20}``
  and nothing else (a non-default ``mode``, or a ``--variant``'s ``ranking``, is added on top);
  the returned memories are mapped back to message ids (a message found through any of its parts
  counts once, at the rank of its best part; further parts of it still take a rank) and scored:
  recall@5/10/20 (share of the evidence messages in the top k), all@10 (every evidence message in
  the top 10) and MRR (first evidence message within the top 20), overall and per category
  (single, multi, instruction, temporal, update);
- a plain BM25 baseline ranks the same memories in this process: ``rank_bm25``'s ``BM25Okapi``
  when that package is installed, otherwise :class:`Bm25`, the same formula written out (k1 1.5,
  b 0.75, the idf floor at 0.25 of the mean idf), over lower-cased ``\\w+`` tokens, no stemming
  and no stop words.

For ``update`` questions the report also gives how often a superseded message (the old value)
ranks above every evidence message (the current value).

    python bench/eval_long.py                                   # private server; hybrid, keyword, vector, BM25
    python bench/eval_long.py --modes hybrid --conversations L01,L02
    python bench/eval_long.py --variant default='{}' --variant b075='{"bm25_b": 0.75}'
    python bench/eval_long.py --base-url http://127.0.0.1:8000 --token egm_...
    python bench/eval_long.py --self-test                       # offline checks, no server
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import common
import eval_retrieval as er

DEFAULT_DATASET = common.BENCH_DIR / "eval" / "long" / "sessions.json"
DEFAULT_OUT_DIR = common.BENCH_DIR / "results"
CATEGORIES = ("single", "multi", "instruction", "temporal", "update")
MODES = ("hybrid", "keyword", "vector")
BM25 = "bm25"
MAX_CONTENT_CHARS = 20_000  # the API's per-memory limit (memories/serializers.py)
ROLE_PREFIX = {"user": "User: ", "assistant": "Assistant: "}
SEARCH_LIMIT = 20


# --------------------------------------------------------------------------------------------
# Dataset
# --------------------------------------------------------------------------------------------


@dataclass
class LongSet:
    path: Path
    conversations: list[dict]
    questions: list[dict]

    @property
    def messages(self) -> list[dict]:
        return [m for c in self.conversations for s in c["sessions"] for m in s["messages"]]

    def subset(self, ids: Sequence[str]) -> LongSet:
        unknown = set(ids) - {c["id"] for c in self.conversations}
        if unknown:
            raise SystemExit(f"unknown conversation id(s): {', '.join(sorted(unknown))}")
        return LongSet(
            self.path,
            [c for c in self.conversations if c["id"] in ids],
            [q for q in self.questions if q["conversation_id"] in ids],
        )


def load_set(path: Path) -> LongSet:
    """Load the set and check what the harness relies on (validate.py checks the rest)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if data.get("version") != 1 or "conversations" not in data:
        raise SystemExit(f"{path}: not a long-session set (version 1, conversations, questions)")
    owner: dict[str, str] = {}
    for conv in data["conversations"]:
        for session in conv["sessions"]:
            common.parse_iso(session["date"])
            for msg in session["messages"]:
                if msg["id"] in owner:
                    raise SystemExit(f"{path}: duplicate message id {msg['id']}")
                owner[msg["id"]] = conv["id"]
    for q in data["questions"]:
        if q["category"] not in CATEGORIES:
            raise SystemExit(f"{path}: question {q['id']} has unknown category {q['category']!r}")
        for mid in [*q["evidence"], *q.get("superseded", [])]:
            if owner.get(mid) != q["conversation_id"]:
                raise SystemExit(f"{path}: question {q['id']} cites {mid}, not a message of its conversation")
    return LongSet(Path(path), data["conversations"], data["questions"])


def split_content(content: str, limit: int = MAX_CONTENT_CHARS, prefix: str = "") -> list[str]:
    """``prefix + content`` as one memory, or as consecutive parts of at most ``limit`` characters
    each, every part starting with ``prefix``: cut at the last paragraph break that fits, else the
    last line break, else the last space, else at the limit. Parts are stripped of the blank lines
    at the cut; nothing else is lost or added."""
    if len(prefix) + len(content) <= limit:
        return [prefix + content]
    room = limit - len(prefix)
    if room < 100:
        raise ValueError("the prefix leaves no room for content")
    parts: list[str] = []
    rest = content
    while len(rest) > room:
        window = rest[: room + 1]
        cut = -1
        for sep in ("\n\n", "\n", " "):
            cut = window.rfind(sep, room // 2)
            if cut > 0:
                break
        if cut <= 0:
            cut = room
        parts.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip("\n ")
    if rest.strip():
        parts.append(rest)
    return [prefix + part for part in parts]


def session_memories(session: dict) -> tuple[list[dict], list[str]]:
    """The memories one session becomes, and the message id of each (a split message repeats)."""
    memories: list[dict] = []
    ids: list[str] = []
    for msg in session["messages"]:
        parts = split_content(msg["content"], prefix=ROLE_PREFIX[msg["role"]])
        for i, part in enumerate(parts, 1):
            metadata: dict[str, Any] = {"message_id": msg["id"]}
            if len(parts) > 1:
                metadata |= {"part": i, "parts": len(parts)}
            memories.append({"content": part, "created_at": session["date"], "metadata": metadata})
            ids.append(msg["id"])
    return memories, ids


# --------------------------------------------------------------------------------------------
# BM25 baseline (in-process)
# --------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"\w+")


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


class Bm25:
    """Okapi BM25 as ``rank_bm25.BM25Okapi`` computes it, for when that package is absent:
    idf = ln((N - n + 0.5) / (n + 0.5)), a negative idf replaced by ``epsilon`` times the mean
    idf; score = sum over query tokens of idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))."""

    def __init__(self, corpus: list[list[str]], k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25):
        self.k1, self.b = k1, b
        self.doc_freqs = [Counter(doc) for doc in corpus]
        self.doc_len = [len(doc) for doc in corpus]
        self.avgdl = sum(self.doc_len) / len(corpus) if corpus else 0.0
        df: Counter[str] = Counter()
        for freqs in self.doc_freqs:
            df.update(freqs.keys())
        n = len(corpus)
        self.idf = {word: math.log(n - count + 0.5) - math.log(count + 0.5) for word, count in df.items()}
        floor = epsilon * (sum(self.idf.values()) / len(self.idf)) if self.idf else 0.0
        for word, value in self.idf.items():
            if value < 0:
                self.idf[word] = floor

    def get_scores(self, query: list[str]) -> list[float]:
        scores = [0.0] * len(self.doc_freqs)
        for word in query:
            idf = self.idf.get(word)
            if idf is None:
                continue
            for i, freqs in enumerate(self.doc_freqs):
                tf = freqs.get(word)
                if tf:
                    norm = self.k1 * (1 - self.b + self.b * self.doc_len[i] / self.avgdl)
                    scores[i] += idf * tf * (self.k1 + 1) / (tf + norm)
        return scores


def bm25_index(corpus: list[list[str]]) -> tuple[Any, str]:
    """rank_bm25's BM25Okapi when installed, else :class:`Bm25`; and which one it was."""
    try:
        from rank_bm25 import BM25Okapi  # type: ignore[import-not-found]
    except ImportError:
        return Bm25(corpus), "bench/eval_long.py's Bm25 (rank_bm25 is not installed)"
    return BM25Okapi(corpus), "rank_bm25.BM25Okapi"


def bm25_records(dataset: LongSet, limit: int = SEARCH_LIMIT) -> tuple[list[dict], str]:
    """Score every question with plain BM25 over its conversation's memories (the same parts
    that are ingested)."""
    records: list[dict] = []
    which = ""
    for conv in dataset.conversations:
        docs: list[str] = []
        owners: list[str] = []
        for session in conv["sessions"]:
            memories, ids = session_memories(session)
            docs += [m["content"] for m in memories]
            owners += ids
        index, which = bm25_index([tokenize(d) for d in docs])
        memory_turns = {str(i): [mid] for i, mid in enumerate(owners)}
        for q in (q for q in dataset.questions if q["conversation_id"] == conv["id"]):
            scores = index.get_scores(tokenize(q["question"]))
            order = sorted(range(len(docs)), key=lambda i: (-scores[i], i))[:limit]
            ranked = er.expand_to_turns([str(i) for i in order], memory_turns)
            records.append(_record(q, "–", BM25, ranked[:limit], 0.0))
    return records, which


# --------------------------------------------------------------------------------------------
# Running against the server
# --------------------------------------------------------------------------------------------


def ingest(client: Any, dataset: LongSet, prefix: str, progress: bool = True) -> dict[str, er.IngestedConversation]:
    """One bucket per conversation, one write request per session (messages in order)."""
    ingested: dict[str, er.IngestedConversation] = {}
    for conv in dataset.conversations:
        bucket_id = client.create_bucket(f"{prefix}-{conv['id']}")
        batches = [(session["id"], *session_memories(session)) for session in conv["sessions"]]
        ingested[conv["id"]] = written = er.ingest_batches(client, conv["id"], bucket_id, batches)
        if progress:
            count = sum(len(memories) for _label, memories, _ids in batches)
            common.log(
                f"ingested {conv['id']}: {count} memories in {len(conv['sessions'])} requests, {written.seconds:.1f}s"
            )
    return ingested


def _record(q: dict, variant: str, mode: str, ranked: list[str], latency_ms: float) -> dict:
    return {
        "variant": variant,
        "mode": mode,
        "question_id": q["id"],
        "category": q["category"],
        "conversation_id": q["conversation_id"],
        "evidence": q["evidence"],
        "superseded": q.get("superseded", []),
        "ranked": ranked,
        "scores": er.score_question(ranked, q["evidence"]),
        "latency_ms": latency_ms,
    }


def run_searches(
    client: Any,
    dataset: LongSet,
    ingested: dict[str, er.IngestedConversation],
    variants: list[er.Variant],
    modes: list[str],
    progress: bool = True,
) -> list[dict]:
    records: list[dict] = []
    total = len(variants) * len(modes) * len(dataset.questions)
    for variant in variants:
        for mode in modes:
            extra = er.search_body(variant, mode)
            warm = dataset.questions[0]
            client.search(ingested[warm["conversation_id"]].bucket_id, warm["question"], limit=SEARCH_LIMIT, **extra)
            for q in dataset.questions:
                conv = ingested[q["conversation_id"]]
                resp = client.search(conv.bucket_id, q["question"], limit=SEARCH_LIMIT, **extra)
                ranked = er.expand_to_turns([str(h["id"]) for h in resp.data["results"]], conv.memory_turns)
                records.append(_record(q, variant.name, mode, ranked[:SEARCH_LIMIT], resp.elapsed * 1000.0))
                if progress and len(records) % 100 == 0:
                    common.log(f"searched {len(records)}/{total}")
    return records


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def stale_first(records: list[dict]) -> float:
    """Share of update questions (with superseded messages named) whose old value outranks
    every evidence message (or appears while the evidence does not)."""
    relevant = [r for r in records if r["category"] == "update" and r["superseded"]]
    if not relevant:
        return float("nan")
    bad = 0
    for r in relevant:
        rank = {mid: i for i, mid in enumerate(r["ranked"])}
        best_new = min((rank[m] for m in r["evidence"] if m in rank), default=math.inf)
        best_old = min((rank[m] for m in r["superseded"] if m in rank), default=math.inf)
        bad += best_old < best_new
    return bad / len(relevant)


def _rows_by_key(records: list[dict]) -> dict[tuple[str, str], list[dict]]:
    by_key: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in records:
        by_key[(r["variant"], r["mode"])].append(r)
    return by_key


def summary_rows(records: list[dict]) -> list[list[Any]]:
    rows = []
    for (variant, mode), recs in _rows_by_key(records).items():
        agg = er.aggregate(recs)
        if mode == BM25:
            lat = ["–", "–"]
        else:
            summary = common.latency_summary([r["latency_ms"] / 1000.0 for r in recs])
            lat = [f"{summary['p50']:.1f}", f"{summary['p95']:.1f}"]
        rows.append(
            [variant, mode, *(er._fmt(agg[m]) for m in er.METRICS), er._fmt(stale_first(recs)), *lat]
        )  # fmt: skip
    return rows


def category_rows(records: list[dict], metric: str) -> list[list[Any]]:
    rows = []
    for (variant, mode), recs in _rows_by_key(records).items():
        per = [er.aggregate(r for r in recs if r["category"] == c)[metric] for c in CATEGORIES]
        rows.append([variant, mode, *(er._fmt(x) for x in per), er._fmt(er.aggregate(recs)[metric])])
    return rows


def dataset_lines(dataset: LongSet) -> list[str]:
    msgs = dataset.messages
    lengths = {role: sorted(len(m["content"]) for m in msgs if m["role"] == role) for role in ROLE_PREFIX}
    memories = sum(len(split_content(m["content"], prefix=ROLE_PREFIX[m["role"]])) for m in msgs)  # what is ingested
    split = sum(1 for m in msgs if len(ROLE_PREFIX[m["role"]]) + len(m["content"]) > MAX_CONTENT_CHARS)
    cats = Counter(q["category"] for q in dataset.questions)
    lines = [
        f"- `{_relative(dataset.path)}`: {len(dataset.conversations)} conversations, "
        f"{sum(len(c['sessions']) for c in dataset.conversations)} sessions, {len(msgs)} messages "
        f"({memories} memories: {split} message(s) over {MAX_CONTENT_CHARS:,} characters split into parts), "
        f"{len(dataset.questions)} questions ({', '.join(f'{c} {cats.get(c, 0)}' for c in CATEGORIES)})",
    ]
    for role, values in lengths.items():
        if values:
            lines.append(
                f"- {role} messages: median {common.median(values):,.0f} characters, p95 "
                f"{common.percentile(values, 95):,.0f}, max {max(values):,}; "
                f"{sum(v > 5000 for v in values) / len(values):.1%} over 5,000"
            )
    return lines


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(common.REPO_ROOT))
    except ValueError:
        return path.name


def headline(records: list[dict]) -> str:
    by = {mode: er.aggregate(recs) for (variant, mode), recs in _rows_by_key(records).items()}
    parts = [f"{mode} {agg['r@10']:.3f}" for mode, agg in by.items()]
    text = "recall@10: " + ", ".join(parts)
    if "hybrid" in by:
        text += f"; hybrid MRR {by['hybrid']['mrr']:.3f}"
    return text


def render_report(
    dataset: LongSet,
    records: list[dict],
    ingested: dict[str, er.IngestedConversation],
    variants: list[er.Variant],
    bm25_impl: str | None,
    description: str,
    machine: dict[str, Any],
    command: str,
) -> str:
    lines = [
        f"# Retrieval quality: long working sessions ({machine['date'][:10]})",
        "",
        "## Setup",
        "",
        common.machine_markdown(machine),
        f"- server: {description}",
        f"- command: `{command}`",
        "",
        "## Data",
        "",
        *dataset_lines(dataset),
        f"- {sum(c.deduplicated for c in ingested.values())} memories deduplicated on write",
        "- one bucket per conversation, one write request per session; `content` is `User: …` / `Assistant: …`, "
        "`created_at` the session date, `metadata` the message id; each search sends the question and `limit` 20 "
        "only (plus a non-default `mode` and a variant's `ranking`)",
        "- recall@k = share of a question's evidence messages in the top k; all@10 = share of questions with all "
        "of their evidence in the top 10; MRR over the top 20; *stale first* = share of update questions where a "
        "superseded message outranks every evidence message",
    ]
    if bm25_impl:
        lines.append(f"- `bm25`: plain BM25 in the harness over the same memories ({bm25_impl}), no server involved")
    metric_headers = [*er.METRICS, "stale first", "p50 ms", "p95 ms"]
    lines += [
        "",
        "## Results",
        "",
        common.markdown_table(["variant", "mode", *metric_headers], summary_rows(records), "ll" + "r" * 8),
        "",
        "### recall@10 by category",
        "",
        common.markdown_table(["variant", "mode", *CATEGORIES, "all"], category_rows(records, "r@10"), "ll" + "r" * 6),
        "",
        "### MRR by category",
        "",
        common.markdown_table(["variant", "mode", *CATEGORIES, "all"], category_rows(records, "mrr"), "ll" + "r" * 6),
        "",
        "### all@10 by category",
        "",
        common.markdown_table(
            ["variant", "mode", *CATEGORIES, "all"], category_rows(records, "all@10"), "ll" + "r" * 6
        ),
        "",
    ]
    for v in variants:
        ranking = json.dumps(v.ranking, sort_keys=True) if v.ranking else "server defaults"
        lines.append(f"- `{v.name}`: ranking `{ranking}`")
    lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET, help="a sessions.json of this shape")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated, from hybrid,keyword,vector,graph")
    parser.add_argument("--no-bm25", action="store_true", help="skip the in-process BM25 baseline")
    parser.add_argument("--conversations", help="comma-separated conversation ids (default: all)")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=JSON", help="ranking overrides")
    parser.add_argument("--ranking", help="JSON object of ranking overrides every variant extends")
    parser.add_argument("--out", type=Path, help="report path (default bench/results/eval-long-<date>.md)")
    parser.add_argument("--no-write", action="store_true", help="print the report only")
    parser.add_argument("--json-out", type=Path, help="also write every per-question result here")
    parser.add_argument("--self-test", action="store_true", help="offline checks on an invented sample, then exit")
    common.add_server_args(parser)
    args = parser.parse_args(argv)
    if args.self_test:
        return self_test()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if set(modes) - set(er.ALL_MODES):
        parser.error(f"modes are {er.ALL_MODES}")
    variants = er.parse_variants(args.ranking, args.variant)
    dataset = load_set(args.dataset)
    if args.conversations:
        dataset = dataset.subset([c.strip() for c in args.conversations.split(",") if c.strip()])
    machine, command = common.machine_info(), common.command_line()
    records: list[dict] = []
    bm25_impl = None
    if not args.no_bm25:
        bm25, bm25_impl = bm25_records(dataset)
        records += bm25
        common.log(f"BM25 baseline ({bm25_impl}): recall@10 {er.aggregate(bm25)['r@10']:.3f}")
    ingested: dict[str, er.IngestedConversation] = {}
    description = "none (BM25 only)"
    if modes:
        prefix = f"long-{datetime.now().strftime('%Y%m%d%H%M%S')}"
        with common.server_from_args(args) as target, target.client() as client:
            try:
                ingested.update(ingest(client, dataset, prefix))
                records = run_searches(client, dataset, ingested, variants, modes) + records
            finally:
                if not target.private:
                    for conv in ingested.values():
                        client.delete_bucket(conv.bucket_id)
            description = target.describe()
    report = render_report(dataset, records, ingested, variants, bm25_impl, description, machine, command)
    out = args.out or DEFAULT_OUT_DIR / f"eval-long-{machine['date'][:10]}.md"
    header = common.report_header(__file__, headline(records), info=machine, command=command)
    common.publish_report(report, out=out, name="long", no_write=args.no_write, header=header)
    if args.json_out:
        args.json_out.write_text(json.dumps({"machine": machine, "records": records}), encoding="utf-8")
    return 0


# --------------------------------------------------------------------------------------------
# Offline self-test
# --------------------------------------------------------------------------------------------


class _FakeClient:
    """Buckets in memory, exact-text dedup, word-overlap 'search'."""

    def __init__(self) -> None:
        self.buckets: dict[str, list[dict]] = {}
        self.searches: list[dict] = []

    def create_bucket(self, name: str, description: str = "") -> str:
        self.buckets[f"b{len(self.buckets) + 1}"] = []
        return f"b{len(self.buckets)}"

    def delete_bucket(self, bucket_id: str) -> None:
        self.buckets.pop(bucket_id, None)

    def ingest(self, bucket_id: str, memories: list[dict]) -> common.Response:
        rows = self.buckets[bucket_id]
        results = []
        for m in memories:
            assert len(m["content"]) <= MAX_CONTENT_CHARS, len(m["content"])
            same = next((r for r in rows if r["content"] == m["content"]), None)
            if same is None:
                rows.append({**m, "id": f"{bucket_id}-{len(rows) + 1}"})
            results.append({"id": (same or rows[-1])["id"], "deduplicated": same is not None})
        return common.Response(201, {"results": results}, 0.001)

    def search(self, bucket_id: str, query: str, **params: Any) -> common.Response:
        self.searches.append({"query": query, **params})
        words = set(tokenize(query))
        scored = [(len(words & set(tokenize(r["content"]))), i, r) for i, r in enumerate(self.buckets[bucket_id])]
        scored = [t for t in scored if t[0]]
        scored.sort(key=lambda t: (-t[0], t[1]))
        return common.Response(200, {"results": [{"id": r["id"]} for _, _, r in scored[: params["limit"]]]}, 0.002)


def _sample() -> dict:
    long_reply = "\n\n".join(f"Paragraph {i}: " + "cast iron skillet seasoning " * 60 for i in range(15))
    return {
        "version": 1,
        "description": "invented",
        "conversations": [
            {
                "id": "L01",
                "user_name": "Ana",
                "topic": "cooking",
                "sessions": [
                    {
                        "id": "L01-s1",
                        "date": "2025-01-02T10:00:00Z",
                        "messages": [
                            {"id": "L01-s1-m01", "role": "user", "content": "I never eat mushrooms."},
                            {"id": "L01-s1-m02", "role": "assistant", "content": "Noted: no mushrooms."},
                        ],
                    },
                    {
                        "id": "L01-s2",
                        "date": "2025-02-03T10:00:00Z",
                        "messages": [
                            {"id": "L01-s2-m01", "role": "user", "content": "How do I season a skillet?"},
                            {"id": "L01-s2-m02", "role": "assistant", "content": long_reply},
                            {"id": "L01-s2-m03", "role": "user", "content": "Now I eat mushrooms daily."},
                            {"id": "L01-s2-m04", "role": "assistant", "content": "Great, mushrooms are back."},
                        ],
                    },
                ],
            }
        ],
        "questions": [
            {"id": "L01-q01", "conversation_id": "L01", "asked_at": "2025-03-01T00:00:00Z", "category": "single",
             "question": "skillet seasoning paragraph", "evidence": ["L01-s2-m02"]},
            {"id": "L01-q02", "conversation_id": "L01", "asked_at": "2025-03-01T00:00:00Z", "category": "update",
             "question": "do I eat mushrooms", "evidence": ["L01-s2-m03"], "superseded": ["L01-s1-m01"]},
        ],
    }  # fmt: skip


def self_test() -> int:
    import tempfile

    # splitting: every part within the limit, prefixed, in order, nothing lost
    text = "\n\n".join("word " * 900 for _ in range(12))
    parts = split_content(text, prefix="Assistant: ")
    assert len(parts) == 3 and all(len(p) <= MAX_CONTENT_CHARS and p.startswith("Assistant: ") for p in parts)
    assert re.sub(r"\s+", "", "".join(p[len("Assistant: ") :] for p in parts)) == re.sub(r"\s+", "", text)
    assert split_content("short", prefix="User: ") == ["User: short"]
    one_line = "x" * 45_000
    assert [len(p) for p in split_content(one_line, prefix="A: ")] == [20_000, 20_000, 5_009]
    # the memories of a session: role prefix, the session date, the message id (and parts)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sessions.json"
        path.write_text(json.dumps(_sample()), encoding="utf-8")
        data = load_set(path)
    memories, ids = session_memories(data.conversations[0]["sessions"][1])
    assert ids[0] == "L01-s2-m01" and ids[-1] == "L01-s2-m04" and ids.count("L01-s2-m02") == 2, ids
    assert memories[0] == {
        "content": "User: How do I season a skillet?",
        "created_at": "2025-02-03T10:00:00Z",
        "metadata": {"message_id": "L01-s2-m01"},
    }
    assert memories[1]["metadata"] == {"message_id": "L01-s2-m02", "part": 1, "parts": 2}
    assert memories[2]["content"].startswith("Assistant: Paragraph")
    # BM25: the formula against a hand-computed case, and the fallback ranks the right message first
    bm = Bm25([["a", "b"], ["b", "c", "c"], ["d"]])
    idf_c = math.log(3 - 1 + 0.5) - math.log(1 + 0.5)
    want = idf_c * 2 * 2.5 / (2 + 1.5 * (1 - 0.75 + 0.75 * 3 / 2))
    assert abs(bm.get_scores(["c"])[1] - want) < 1e-12 and bm.get_scores(["c"])[0] == 0.0
    records, _ = bm25_records(data)
    assert records[0]["ranked"][0] == "L01-s2-m02" and records[0]["scores"]["r@5"] == 1.0, records[0]
    # the whole run against a fake server: one request per session, the protocol's search body
    client = _FakeClient()
    ingested = ingest(client, data, "t", progress=False)
    assert len(client.buckets["b1"]) == 7  # 6 messages, one of them in two parts
    recs = run_searches(client, data, ingested, [er.Variant("default", None)], ["hybrid", "keyword"], progress=False)
    assert client.searches[1] == {"query": "skillet seasoning paragraph", "limit": 20}, client.searches[1]
    assert client.searches[-1]["mode"] == "keyword"
    first = recs[0]
    assert first["ranked"][0] == "L01-s2-m02" and first["ranked"][1].startswith("~"), first["ranked"]
    assert er.search_body(er.Variant("v", {"bm25_b": 0.75}), "vector") == {
        "mode": "vector",
        "ranking": {"bm25_b": 0.75},
    }
    # stale first: the old value above the new one counts
    fake = {"category": "update", "evidence": ["n"], "superseded": ["o"]}
    assert stale_first([{**fake, "ranked": ["o", "n"]}, {**fake, "ranked": ["n", "o"]}]) == 0.5
    assert stale_first([{**fake, "ranked": ["o"]}]) == 1.0 and stale_first([{**fake, "ranked": []}]) == 0.0
    report = render_report(data, recs + records, ingested, [er.Variant("default", None)], "x", "fake",
                           common.machine_info(), "python bench/eval_long.py")  # fmt: skip
    assert "| default | hybrid |" in report and "| – | bm25 |" in report, report
    print("self-test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
