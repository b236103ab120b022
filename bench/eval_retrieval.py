"""Retrieval quality on the conversational-memory evaluation set, through Engram's HTTP API.

Each conversation of ``bench/eval/conversations.json`` goes into its own bucket (one request per
session, turns in order, ``created_at`` = session start + 1 minute per turn, ``run_id`` = session id,
``attributed_to`` = role, ``metadata.turn_id`` = turn id). Every question is then searched in each
mode of ``--modes`` with ``now`` = the question's ``asked_at``, and the returned memories are mapped
back to turn ids to score:

- recall@k (k = 5, 10, 20): the fraction of the question's evidence turns in the top k, averaged;
- all@10: the fraction of questions whose evidence is *all* in the top 10;
- MRR: the reciprocal rank of the first evidence turn within the top 20, averaged.

With ``--ingest conversations`` each session goes through ``POST .../conversations`` instead (one
source per session, message timestamps as above), is distilled into statements in the background,
and the evidence turns are mapped to the memories derived from them through the source's provenance
(``GET /sources/{id}``): a turn counts as found at k if any memory derived from it is among the top
k memories. ``--speaker`` also sends the user's first name as the conversation's ``speaker`` with
``resolve_first_person`` (the user's "I" and "my" become their name).

Ranking variants (``--variant NAME=JSON``, repeatable) send their JSON as the search request's
``ranking`` field, so fusion settings can be compared in one run; ``--ranking JSON`` is a base that
every variant extends. Results are deterministic, so there is no ``--repeat``; search latency
medians are recorded on the way. The Markdown report goes to
``bench/results/retrieval-quality-<date>.md`` and to stdout.

    python bench/eval_retrieval.py                                  # private server, default ranking
    python bench/eval_retrieval.py --variant rrf10='{"fusion": "rrf", "rrf_k": 10}' \\
                                   --variant rrf60='{"fusion": "rrf", "rrf_k": 60}'
    python bench/eval_retrieval.py --base-url http://127.0.0.1:8000 --token egm_... --modes hybrid
    python bench/eval_retrieval.py --self-test                      # offline checks, no server
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import common

DEFAULT_DATASET = common.BENCH_DIR / "eval" / "conversations.json"
ALL_MODES = ("keyword", "vector", "hybrid", "graph")
QUESTION_TYPES = ("single-hop", "multi-hop", "temporal", "changed-fact", "preference", "paraphrase")
KS = (5, 10, 20)
ALL_FOUND_K = 10


# --------------------------------------------------------------------------------------------
# Dataset
# --------------------------------------------------------------------------------------------


@dataclass
class Dataset:
    path: Path
    description: str
    conversations: list[dict]
    questions: list[dict]
    turns: dict[str, dict] = field(default_factory=dict)  # turn id -> turn (with "session" and "conversation")

    def summary(self) -> dict[str, Any]:
        sessions = sum(len(c["sessions"]) for c in self.conversations)
        return {
            "conversations": len(self.conversations),
            "sessions": sessions,
            "turns": len(self.turns),
            "questions": len(self.questions),
            "types": Counter(q["type"] for q in self.questions),
        }

    def subset(self, conversation_ids: Iterable[str]) -> Dataset:
        wanted = set(conversation_ids)
        unknown = wanted - {c["id"] for c in self.conversations}
        if unknown:
            raise SystemExit(f"unknown conversation id(s): {', '.join(sorted(unknown))}")
        convs = [c for c in self.conversations if c["id"] in wanted]
        qs = [q for q in self.questions if q["conversation_id"] in wanted]
        turns = {k: v for k, v in self.turns.items() if v["conversation"] in wanted}
        return Dataset(self.path, self.description, convs, qs, turns)


def load_dataset(path: Path) -> Dataset:
    """Load and sanity-check the evaluation set (bench/eval/validate.py does the full check)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if data.get("version") != 1:
        raise ValueError(f"{path}: unsupported version {data.get('version')!r}")
    turns: dict[str, dict] = {}
    for conv in data["conversations"]:
        for session in conv["sessions"]:
            common.parse_iso(session["started_at"])
            for turn in session["turns"]:
                if turn["id"] in turns:
                    raise ValueError(f"{path}: duplicate turn id {turn['id']}")
                turns[turn["id"]] = {**turn, "session": session["id"], "conversation": conv["id"]}
    for q in data["questions"]:
        for tid in q["evidence"]:
            if tid not in turns or turns[tid]["conversation"] != q["conversation_id"]:
                raise ValueError(f"{path}: question {q['id']} cites unknown turn {tid}")
    return Dataset(Path(path), data.get("description", ""), data["conversations"], data["questions"], turns)


def session_memories(session: dict) -> list[dict]:
    """The memories one session becomes: turns in order, one minute apart from the session start."""
    start = common.parse_iso(session["started_at"])
    return [
        {
            "content": turn["content"],
            "attributed_to": turn["role"],
            "run_id": session["id"],
            "created_at": common.iso(start + timedelta(minutes=i)),
            "metadata": {"turn_id": turn["id"]},
        }
        for i, turn in enumerate(session["turns"])
    ]


# --------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------


def recall_at(ranked: Sequence[str], evidence: Sequence[str], k: int) -> float:
    """Fraction of the evidence ids present in the first k ranked ids."""
    if not evidence:
        return 0.0
    top = set(ranked[:k])
    return sum(1 for e in set(evidence) if e in top) / len(set(evidence))


def all_found_at(ranked: Sequence[str], evidence: Sequence[str], k: int) -> float:
    return 1.0 if set(evidence) <= set(ranked[:k]) else 0.0


def reciprocal_rank(ranked: Sequence[str], evidence: Sequence[str], k: int = max(KS)) -> float:
    wanted = set(evidence)
    for i, tid in enumerate(ranked[:k], 1):
        if tid in wanted:
            return 1.0 / i
    return 0.0


def expand_to_turns(memory_ids: Sequence[str], memory_turns: dict[str, list[str]]) -> list[str]:
    """Map ranked memory ids to ranked turn ids. A memory that several identical turns
    deduplicated into stands for all of them, at its rank. A memory that is not a turn
    (a distractor) keeps its rank as a ``~memory-id`` placeholder, so it still pushes
    evidence down."""
    ranked: list[str] = []
    seen: set[str] = set()
    for mid in memory_ids:
        turns = memory_turns.get(str(mid))
        new = [tid for tid in dict.fromkeys(turns or ()) if tid not in seen]
        if not new:
            # A distractor, or (distilled ingest) another memory of turns already ranked: it
            # still takes its rank, so k counts memories, not turns.
            ranked.append(f"~{mid}")
            continue
        seen.update(new)
        ranked.extend(new)
    return ranked


def score_question(ranked_turns: Sequence[str], evidence: Sequence[str]) -> dict[str, float]:
    scores = {f"r@{k}": recall_at(ranked_turns, evidence, k) for k in KS}
    scores[f"all@{ALL_FOUND_K}"] = all_found_at(ranked_turns, evidence, ALL_FOUND_K)
    scores["mrr"] = reciprocal_rank(ranked_turns, evidence)
    return scores


METRICS = (*(f"r@{k}" for k in KS), f"all@{ALL_FOUND_K}", "mrr")
TOKEN_BUDGETS = (128, 256, 512)


def recall_within_tokens(hits: Sequence[Sequence], evidence: Sequence[str], budget: int) -> float:
    """Share of the evidence turns among the best hits that fit in ``budget`` tokens together
    (hits in rank order, ``[token_count, turn ids]``): what an agent's context would hold."""
    found: set[str] = set()
    used = 0
    for tokens, turns in hits:
        used += tokens
        if used > budget:
            break
        found.update(turns)
    return len(found & set(evidence)) / len(set(evidence)) if evidence else 0.0


def aggregate(records: Iterable[dict]) -> dict[str, float]:
    records = list(records)
    if not records:
        return {m: float("nan") for m in METRICS} | {"n": 0}
    out: dict[str, float] = {m: sum(r["scores"][m] for r in records) / len(records) for m in METRICS}
    out["n"] = len(records)
    return out


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------


@dataclass
class Variant:
    name: str
    ranking: dict | None


def deep_merge(base: dict, override: dict) -> dict:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def parse_variants(base_json: str | None, variant_args: Sequence[str]) -> list[Variant]:
    base: dict = {}
    if base_json:
        base = json.loads(base_json)
        if not isinstance(base, dict):
            raise SystemExit("--ranking must be a JSON object")
    if not variant_args:
        return [Variant("default" if not base else "ranking", base or None)]
    variants = []
    for arg in variant_args:
        name, sep, raw = arg.partition("=")
        if not sep or not re.fullmatch(r"[\w.+-]+", name):
            raise SystemExit(f"--variant wants NAME=JSON, got {arg!r}")
        overrides = json.loads(raw) if raw.strip() else {}
        if not isinstance(overrides, dict):
            raise SystemExit(f"--variant {name}: the JSON must be an object")
        if name in {v.name for v in variants}:
            raise SystemExit(f"--variant {name} given twice")
        merged = deep_merge(base, overrides)
        variants.append(Variant(name, merged or None))
    return variants


@dataclass
class IngestedConversation:
    conversation_id: str
    bucket_id: str
    turn_memory: dict[str, str]  # turn id -> memory id
    memory_turns: dict[str, list[str]]  # memory id -> turn ids
    deduplicated: int
    seconds: float
    distractors: int = 0
    # --ingest conversations: the sources, their memories and the sentences the distiller dropped
    sources: list[str] = field(default_factory=list)
    memories: int = 0
    dropped: int = 0


DISTRACTOR_FIELDS = ("content", "attributed_to", "agent_id", "run_id", "hint_tags", "created_at")


def load_distractors(path: Path, per_bucket: int, buckets: int) -> list[list[dict]]:
    """Consecutive slices of a make_corpus.py JSONL file, one per bucket, as API memory items."""
    need = per_bucket * buckets
    rows: list[dict] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if len(rows) >= need:
                break
            raw = json.loads(line)
            item = {k: raw[k] for k in DISTRACTOR_FIELDS if raw.get(k) is not None}
            item["metadata"] = {"distractor": True}
            rows.append(item)
    if len(rows) < need:
        raise SystemExit(f"{path} has {len(rows)} rows; {need} needed for {buckets} buckets x {per_bucket}")
    return [rows[i * per_bucket : (i + 1) * per_bucket] for i in range(buckets)]


def _runs(items: list[dict], max_batch: int = 1000) -> Iterable[list[dict]]:
    """Split items into batches of consecutive rows of one run (at most max_batch each)."""
    batch: list[dict] = []
    for item in items:
        if batch and (item.get("run_id") != batch[-1].get("run_id") or len(batch) >= max_batch):
            yield batch
            batch = []
        batch.append(item)
    if batch:
        yield batch


def ingest_batches(
    client: Any, conversation_id: str, bucket_id: str, batches: Iterable[tuple[str, list[dict], Sequence[str]]]
) -> IngestedConversation:
    """Write each batch in one request, in order: ``(label, memories, item ids)``, the id of the turn or
    message each memory stands for (a message split into parts repeats its id). Maps items to memories
    both ways; an item's first memory answers for it, a deduplicated memory answers for every item
    that wrote it."""
    turn_memory: dict[str, str] = {}
    memory_turns: dict[str, list[str]] = defaultdict(list)
    deduplicated = 0
    seconds = 0.0
    for label, memories, ids in batches:
        resp = client.ingest(bucket_id, memories)
        seconds += resp.elapsed
        results = resp.data["results"]
        if len(results) != len(memories):
            raise RuntimeError(f"{label}: sent {len(memories)} memories, got {len(results)} results")
        for item, result in zip(ids, results, strict=True):
            memory_id = str(result["id"])
            turn_memory.setdefault(item, memory_id)
            if item not in memory_turns[memory_id]:
                memory_turns[memory_id].append(item)
            deduplicated += bool(result.get("deduplicated"))
    return IngestedConversation(conversation_id, bucket_id, turn_memory, dict(memory_turns), deduplicated, seconds)


def search_body(variant: Variant, mode: str) -> dict[str, Any]:
    """The fields a public protocol's search adds to its query and limit: a mode other than hybrid, a
    variant's ranking (LoCoMo's and the long-session set's protocol send nothing else)."""
    extra: dict[str, Any] = {}
    if mode != "hybrid":
        extra["mode"] = mode
    if variant.ranking:
        extra["ranking"] = variant.ranking
    return extra


def ingest_conversation(
    client: Any, conv: dict, bucket_name: str, distractors: Sequence[dict] = ()
) -> IngestedConversation:
    bucket_id = client.create_bucket(bucket_name, description=f"retrieval eval: {conv['id']} ({conv['user_name']})")
    seconds = 0.0
    for batch in _runs(list(distractors)):
        seconds += client.ingest(bucket_id, batch).elapsed
    batches = [(s["id"], session_memories(s), [t["id"] for t in s["turns"]]) for s in conv["sessions"]]
    ingested = ingest_batches(client, conv["id"], bucket_id, batches)
    ingested.seconds += seconds
    ingested.distractors = len(distractors)
    return ingested


def session_messages(session: dict) -> list[dict]:
    """The messages one session becomes for POST .../conversations (times as in session_memories)."""
    return [
        {"role": m["attributed_to"], "content": m["content"], "timestamp": m["created_at"]}
        for m in session_memories(session)
    ]


def submit_conversation(
    client: Any, conv: dict, bucket_name: str, distractors: Sequence[dict] = (), speaker: bool = False
) -> IngestedConversation:
    """Create the bucket and submit every session as a conversation source (processed in the background)."""
    bucket_id = client.create_bucket(bucket_name, description=f"retrieval eval: {conv['id']} ({conv['user_name']})")
    seconds = 0.0
    for batch in _runs(list(distractors)):
        seconds += client.ingest(bucket_id, batch).elapsed
    sources = []
    for session in conv["sessions"]:
        body: dict[str, Any] = {"title": session["id"], "messages": session_messages(session)}
        if speaker:
            body.update(speaker=conv["user_name"].split()[0], resolve_first_person=True)
        resp = client.request("POST", f"/api/v1/buckets/{bucket_id}/conversations", body, expect=202)
        seconds += resp.elapsed
        sources.append(str(resp.data["id"]))
    return IngestedConversation(conv["id"], bucket_id, {}, {}, 0, seconds, len(distractors), sources=sources)


def collect_provenance(client: Any, conv: dict, ingested: IngestedConversation, timeout: float = 3600.0) -> None:
    """Wait until the conversation's sources are done, then map turn ids to the memories derived
    from them: message i of a session is chunk i of its source."""
    deadline = time.monotonic() + timeout
    turn_memory: dict[str, str] = {}
    memory_turns: dict[str, list[str]] = defaultdict(list)
    for session, source_id in zip(conv["sessions"], ingested.sources, strict=True):
        while True:
            data = client.request("GET", f"/api/v1/sources/{source_id}?chunk_limit=1000", expect=200).data
            if data["status"] == "done":
                break
            if data["status"] == "failed" or time.monotonic() > deadline:
                raise RuntimeError(f"source {source_id} ({session['id']}) is {data['status']}: {data['error']}")
            time.sleep(1.0)
        for chunk in data["chunks"]:
            tid = session["turns"][chunk["ordinal"]]["id"]
            for memory in chunk["memories"]:
                turn_memory.setdefault(tid, str(memory["id"]))
                memory_turns[str(memory["id"])].append(tid)
        ingested.deduplicated += data["memories_deduplicated"]
        ingested.memories += data["memories_created"]
        ingested.dropped += data["dropped"]
    ingested.turn_memory = turn_memory
    ingested.memory_turns = dict(memory_turns)


def run_searches(
    client: Any,
    dataset: Dataset,
    ingested: dict[str, IngestedConversation],
    variants: Sequence[Variant],
    modes: Sequence[str],
    limit: int,
    progress: bool = True,
) -> list[dict]:
    records: list[dict] = []
    total = len(variants) * len(modes) * len(dataset.questions)
    done = 0
    for variant in variants:
        for mode in modes:
            # Warm-up (model load, caches) outside the measurement: one query per mode and variant.
            first = dataset.questions[0]
            client.search(
                ingested[first["conversation_id"]].bucket_id,
                first["question"],
                mode=mode,
                limit=limit,
                now=first["asked_at"],
                ranking=variant.ranking,
            )
            for q in dataset.questions:
                conv = ingested[q["conversation_id"]]
                resp = client.search(
                    conv.bucket_id, q["question"], mode=mode, limit=limit, now=q["asked_at"], ranking=variant.ranking
                )
                memory_ids = [str(hit["id"]) for hit in resp.data["results"]]
                ranked = expand_to_turns(memory_ids, conv.memory_turns)
                records.append(
                    {
                        "variant": variant.name,
                        "mode": mode,
                        "mode_used": resp.data.get("mode_used", mode),
                        "warnings": resp.data.get("warnings") or [],
                        "question_id": q["id"],
                        "type": q["type"],
                        "conversation_id": q["conversation_id"],
                        "evidence": q["evidence"],
                        "ranked_turns": ranked[:limit],
                        # per hit, in rank order: its token count and the turns it derives from
                        "hits": [
                            [hit.get("token_count") or 0, list(conv.memory_turns.get(str(hit["id"]), ()))]
                            for hit in resp.data["results"]
                        ],
                        "scores": score_question(ranked, q["evidence"]),
                        "latency_ms": resp.elapsed * 1000.0,
                    }
                )
                done += 1
                if progress and done % 100 == 0:
                    common.log(f"searched {done}/{total}")
    return records


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def _fmt(v: float) -> str:
    return "–" if v != v else f"{v:.3f}"  # NaN -> dash


def render_report(
    *,
    dataset: Dataset,
    records: list[dict],
    variants: Sequence[Variant],
    modes: Sequence[str],
    ingest: dict[str, IngestedConversation],
    target_description: str,
    machine: dict[str, Any],
    command: str,
    limit: int,
    ingest_mode: str = "raw",
    speaker: bool = False,
) -> str:
    summary = dataset.summary()
    type_counts = ", ".join(f"{t} {summary['types'].get(t, 0)}" for t in QUESTION_TYPES)
    memories = sum(len(c.turn_memory) for c in ingest.values())
    dedup = sum(c.deduplicated for c in ingest.values())
    distractors = sum(c.distractors for c in ingest.values())
    ingest_s = sum(c.seconds for c in ingest.values())
    sessions = summary["sessions"]
    lines = [
        f"# Retrieval quality: conversational memory ({machine['date'][:10]})",
        "",
        "## Setup",
        "",
        common.machine_markdown(machine),
        f"- server: {target_description}",
        f"- command: `{command}`",
        "",
        "## Dataset",
        "",
        f"- `{_relative(dataset.path)}`: {summary['conversations']} conversations, {sessions} sessions, "
        f"{summary['turns']} turns, {summary['questions']} questions",
        f"- question types: {type_counts}",
        (
            f"- ingested {memories} turns as memories ({dedup} deduplicated) in {sessions} batch requests, "
            f"{ingest_s:.1f} s of request time (distractors included)"
            if ingest_mode == "raw"
            else f"- ingested through `POST /conversations` ({sum(len(c.sources) for c in ingest.values())} sources, "
            f"one per session{', first person resolved to the user' if speaker else ''}): "
            f"{sum(c.memories for c in ingest.values())} memories created, {dedup} statements deduplicated, "
            f"{sum(c.dropped for c in ingest.values())} sentences dropped; {memories} of {summary['turns']} turns "
            "have at least one memory; a turn counts as found at k if any memory derived from it is in the top k"
        ),
        (
            f"- distractors: {distractors // max(len(ingest), 1)} generated memories about other people in each "
            f"conversation's bucket ({distractors} in all)"
            if distractors
            else "- distractors: none (each bucket holds one conversation only)"
        ),
        f"- each search asks for `limit` = {limit} with `now` = the question's `asked_at`; "
        f"recall@k = share of evidence turns in the top k; all@{ALL_FOUND_K} = share of questions with "
        f"every evidence turn in the top {ALL_FOUND_K}; MRR over the top {max(KS)}",
        "",
    ]
    by_key: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in records:
        by_key[(r["variant"], r["mode"])].append(r)

    if len(variants) > 1:
        lines += ["## Variants compared", ""]
        rows = []
        for v in variants:
            for mode in modes:
                agg = aggregate(by_key[(v.name, mode)])
                rows.append([v.name, mode, *(_fmt(agg[m]) for m in METRICS)])
        lines += [common.markdown_table(["variant", "mode", *METRICS], rows, "ll" + "r" * len(METRICS)), ""]

    for v in variants:
        ranking = json.dumps(v.ranking, sort_keys=True) if v.ranking else "server defaults"
        lines += [f"## Variant `{v.name}`", "", f"ranking: `{ranking}`", ""]
        rows = []
        for mode in modes:
            recs = by_key[(v.name, mode)]
            agg = aggregate(recs)
            lat = common.latency_summary([r["latency_ms"] / 1000.0 for r in recs])
            used = Counter(r["mode_used"] for r in recs)
            used_note = ", ".join(f"{m} {n}" for m, n in used.items()) if set(used) != {mode} else mode
            rows.append(
                [mode, *(_fmt(agg[m]) for m in METRICS), f"{lat.get('p50', 0):.1f}", f"{lat.get('p95', 0):.1f}"]
                + [used_note]
            )
        headers = ["mode", *METRICS, "p50 ms", "p95 ms", "mode used"]
        lines += [common.markdown_table(headers, rows, "l" + "r" * (len(headers) - 2) + "l"), ""]

        rows = []
        for mode in modes:
            recs = [r for r in by_key[(v.name, mode)] if "hits" in r]
            if recs:
                cells = [_fmt(sum(recall_within_tokens(r["hits"], r["evidence"], b) for r in recs) / len(recs))
                         for b in TOKEN_BUDGETS]  # fmt: skip
                tokens = statistics.median(sum(t for t, _ in r["hits"][:10]) for r in recs)
                rows.append([mode, *cells, f"{tokens:.0f}"])
        if rows:
            lines += ["Recall within a token budget (the best results whose token counts fit, in rank order):", ""]
            headers = ["mode", *(f"r@{b} tok" for b in TOKEN_BUDGETS), "median tokens of top 10"]
            lines += [common.markdown_table(headers, rows, "l" + "r" * (len(headers) - 1)), ""]

        lines += [f"Recall@10 / all@{ALL_FOUND_K} by question type:", ""]
        rows = []
        for qtype in QUESTION_TYPES:
            cells = []
            n = 0
            for mode in modes:
                recs = [r for r in by_key[(v.name, mode)] if r["type"] == qtype]
                n = len(recs)
                agg = aggregate(recs)
                cells.append(f"{_fmt(agg['r@10'])} / {_fmt(agg[f'all@{ALL_FOUND_K}'])}")
            rows.append([qtype, n, *cells])
        lines += [common.markdown_table(["type", "n", *modes], rows, "lr" + "r" * len(modes)), ""]

        warnings = Counter(w for mode in modes for r in by_key[(v.name, mode)] for w in r["warnings"])
        if warnings:
            lines += ["Server warnings:", ""]
            lines += [f"- {w} ({n}×)" for w, n in warnings.most_common(10)]
            lines += [""]

    misses = _missed_everywhere(records, modes, variants)
    if misses:
        lines += [
            f"## Questions with no evidence in the top {max(KS)} in any mode ({len(misses)})",
            "",
            *[f"- {qid} ({qtype}): {text}" for qid, qtype, text in misses[:30]],
            "" if len(misses) <= 30 else f"- … and {len(misses) - 30} more",
            "",
        ]
    return "\n".join(lines).rstrip() + "\n"


def _missed_everywhere(records: list[dict], modes: Sequence[str], variants: Sequence[Variant]) -> list[tuple]:
    best: dict[str, float] = defaultdict(float)
    meta: dict[str, dict] = {}
    for r in records:
        best[r["question_id"]] = max(best[r["question_id"]], r["scores"][f"r@{max(KS)}"])
        meta[r["question_id"]] = r
    return [(qid, meta[qid]["type"], meta[qid].get("question", "")) for qid, b in sorted(best.items()) if b == 0.0]


def _relative(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(common.REPO_ROOT))
    except ValueError:
        return str(path)


def default_report_path() -> Path:
    return common.RESULTS_DIR / f"retrieval-quality-{datetime.now(UTC).strftime('%Y-%m-%d')}.md"


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def evaluate(
    client: Any,
    dataset: Dataset,
    variants: Sequence[Variant],
    modes: Sequence[str],
    limit: int,
    bucket_prefix: str,
    settle: float = 0.0,
    progress: bool = True,
    ingested: dict[str, IngestedConversation] | None = None,
    distractors: Sequence[Sequence[dict]] | None = None,
    after_ingest: Any = None,
    ingest_mode: str = "raw",
    speaker: bool = False,
    after_submit: Any = None,
) -> tuple[dict[str, IngestedConversation], list[dict]]:
    """Ingest every conversation, then run every search. ``ingested`` (filled as buckets are
    created) lets the caller clean up even when a step fails halfway. ``ingest_mode`` is ``raw``
    (turns as memories) or ``conversations`` (sessions through the conversations endpoint;
    ``after_submit`` runs once everything is submitted, e.g. to process the sources)."""
    ingested = {} if ingested is None else ingested
    for i, conv in enumerate(dataset.conversations):
        extra = distractors[i] if distractors else ()
        name = f"{bucket_prefix}-{conv['id']}"
        if ingest_mode == "conversations":
            ingested[conv["id"]] = submit_conversation(client, conv, name, extra, speaker=speaker)
            continue
        ingested[conv["id"]] = ingest_conversation(client, conv, name, extra)
        if progress:
            c = ingested[conv["id"]]
            common.log(
                f"ingested {conv['id']}: {len(c.turn_memory)} turns + {c.distractors} distractors in {c.seconds:.2f}s"
            )
    if ingest_mode == "conversations":
        started = time.perf_counter()
        if after_submit is not None:
            after_submit()
        for conv in dataset.conversations:
            c = ingested[conv["id"]]
            collect_provenance(client, conv, c)
            if progress:
                common.log(
                    f"distilled {conv['id']}: {len(c.sources)} sources, {c.memories} memories created "
                    f"({c.deduplicated} deduplicated, {c.dropped} sentences dropped), "
                    f"{len(c.turn_memory)} turns with memories"
                )
        if progress:
            common.log(f"sources processed and collected in {time.perf_counter() - started:.1f}s")
    if settle > 0:
        common.log(f"waiting {settle:.0f}s for asynchronous enrichment")
        time.sleep(settle)
    if after_ingest is not None:
        after_ingest()
    records = run_searches(client, dataset, ingested, variants, modes, limit, progress=progress)
    text_by_id = {q["id"]: q["question"] for q in dataset.questions}
    for r in records:
        r["question"] = text_by_id[r["question_id"]]
    return ingested, records


def _build_graph(target: Any) -> None:
    if target.private is None:
        raise SystemExit("--build-graph needs a private server (it runs manage.py in the server's ENGRAM_HOME)")
    started = time.perf_counter()
    common.log("building the knowledge graph (rebuild_graph --all)")
    common.manage("rebuild_graph", "--all", env=target.private.env(), timeout=3600)
    common.log(f"graph built in {time.perf_counter() - started:.1f}s")


def _process_sources(target: Any) -> None:
    """A private server runs no worker unless --with-worker: distil the submitted sources with
    the same command an operator would use (manage.py process_sources), in the server's home."""
    started = time.perf_counter()
    common.log("processing the submitted sources (manage.py process_sources)")
    common.manage("process_sources", "--no-progress", env=target.private.env(), timeout=7200)
    common.log(f"sources processed in {time.perf_counter() - started:.1f}s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Retrieval quality (recall@k of evidence turns) on the conversational evaluation set.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--modes", default="keyword,vector,hybrid", help=f"comma-separated, from {','.join(ALL_MODES)}")
    parser.add_argument("--ranking", help="JSON object of ranking overrides sent with every search")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=JSON",
        help="a named set of ranking overrides (on top of --ranking); repeat to compare several",
    )
    parser.add_argument("--conversations", help="only these conversation ids, comma-separated (e.g. c01,c02)")
    parser.add_argument("--limit", type=int, default=max(KS), help="results requested per search")
    parser.add_argument("--settle", type=float, default=0.0, help="seconds to wait after ingest (async enrichment)")
    parser.add_argument(
        "--distractors",
        type=Path,
        help="a make_corpus.py JSONL file; a slice of it is ingested into each conversation's bucket first",
    )
    parser.add_argument(
        "--distractors-per-bucket", type=int, default=2000, help="rows of --distractors per bucket (default 2000)"
    )
    parser.add_argument("--out", type=Path, help="report path (default bench/results/retrieval-quality-<date>.md)")
    parser.add_argument("--no-write", action="store_true", help="print the report only")
    parser.add_argument("--json-out", type=Path, help="also write every per-question result as JSON here")
    parser.add_argument("--keep-buckets", action="store_true", help="do not delete the buckets (existing server)")
    parser.add_argument(
        "--build-graph",
        action="store_true",
        help="after ingest, build the knowledge graph synchronously (manage.py rebuild_graph --all; private server)",
    )
    parser.add_argument(
        "--ingest",
        choices=["raw", "conversations"],
        default="raw",
        help="raw: turns as memories (default); conversations: each session through POST .../conversations, "
        "distilled in the background, turns mapped to memories through the sources' provenance",
    )
    parser.add_argument(
        "--speaker",
        action="store_true",
        help="with --ingest conversations: send the user's first name as speaker, with resolve_first_person",
    )
    parser.add_argument("--self-test", action="store_true", help="run the offline checks and exit")
    common.add_server_args(parser)
    args = parser.parse_args(argv)

    if args.self_test:
        return self_test()

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in ALL_MODES]
    if bad or not modes:
        parser.error(f"unknown mode(s) {bad}; choose from {ALL_MODES}")
    if args.limit < max(KS):
        parser.error(f"--limit must be at least {max(KS)} to compute recall@{max(KS)}")
    variants = parse_variants(args.ranking, args.variant)
    dataset = load_dataset(args.dataset)
    if args.conversations:
        dataset = dataset.subset(c.strip() for c in args.conversations.split(",") if c.strip())
    distractors = None
    if args.distractors:
        distractors = load_distractors(args.distractors, args.distractors_per_bucket, len(dataset.conversations))
    machine = common.machine_info()
    command = common.command_line()
    bucket_prefix = f"eval-{datetime.now(UTC).strftime('%Y%m%d%H%M%S')}"

    ingested: dict[str, IngestedConversation] = {}
    with common.server_from_args(args) as target, target.client() as client:
        try:
            _, records = evaluate(
                client,
                dataset,
                variants,
                modes,
                args.limit,
                bucket_prefix,
                args.settle,
                ingested=ingested,
                distractors=distractors,
                after_ingest=(lambda: _build_graph(target)) if args.build_graph else None,
                ingest_mode=args.ingest,
                speaker=args.speaker,
                after_submit=(lambda: _process_sources(target)) if target.private and not args.with_worker else None,
            )
        finally:
            if not target.private and not args.keep_buckets:
                for conv in ingested.values():
                    client.delete_bucket(conv.bucket_id)
        description = target.describe()

    report = render_report(
        dataset=dataset,
        records=records,
        variants=variants,
        modes=modes,
        ingest=ingested,
        target_description=description,
        machine=machine,
        command=command,
        limit=args.limit,
        ingest_mode=args.ingest,
        speaker=args.speaker,
    )
    print(report)
    if not args.no_write:
        out = args.out or default_report_path()
        out.parent.mkdir(parents=True, exist_ok=True)
        first = variants[0].name
        recall = {m: aggregate([r for r in records if r["variant"] == first and r["mode"] == m])["r@10"] for m in modes}
        headline = f"recall@10 of {first}: " + ", ".join(f"{m} {value:.3f}" for m, value in recall.items())
        series = f"{args.distractors_per_bucket} distractors" if distractors else ""
        if args.ingest != "raw":
            series = " ".join(filter(None, [series, f"ingest {args.ingest}"]))
        header = common.report_header(__file__, headline, series=series, info=machine, command=command)
        out.write_text(f"{header}\n{report}", encoding="utf-8")
        common.log(f"report written to {out}")
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps({"machine": machine, "records": records}, indent=1), encoding="utf-8")
        common.log(f"per-question results written to {args.json_out}")
    return 0


# --------------------------------------------------------------------------------------------
# Offline self-test: dataset loading, metrics, and the whole pipeline against a fake server
# --------------------------------------------------------------------------------------------


class _FakeClient:
    """Stands in for common.BenchClient: buckets in memory, word-overlap 'search'."""

    def __init__(self) -> None:
        self.buckets: dict[str, list[dict]] = {}
        self.deleted: list[str] = []
        self.searches: list[dict] = []

    def create_bucket(self, name: str, description: str = "") -> str:
        bucket_id = f"b{len(self.buckets) + 1}"
        self.buckets[bucket_id] = []
        return bucket_id

    def delete_bucket(self, bucket_id: str) -> None:
        self.deleted.append(bucket_id)

    def ingest(self, bucket_id: str, memories: list[dict]) -> common.Response:
        rows = self.buckets[bucket_id]
        results = []
        for m in memories:
            for row in rows:  # dedup on exact text, like the server's normalised-text invariant
                if row["content"].lower() == m["content"].lower():
                    results.append({"id": row["id"], "deduplicated": True})
                    break
            else:
                row = {**m, "id": f"{bucket_id}-m{len(rows) + 1}"}
                rows.append(row)
                results.append({"id": row["id"], "deduplicated": False})
        return common.Response(201, {"results": results}, 0.001)

    def search(self, bucket_id: str, query: str, **params: Any) -> common.Response:
        self.searches.append({"bucket_id": bucket_id, "query": query, **params})
        words = set(re.findall(r"[a-z0-9]+", query.lower())) - {"what", "my", "i", "the", "a", "did", "do", "is"}
        scored = []
        for row in self.buckets[bucket_id]:
            overlap = len(words & set(re.findall(r"[a-z0-9]+", row["content"].lower())))
            if overlap:
                scored.append((overlap, row["created_at"], row["id"], row))
        scored.sort(key=lambda t: (-t[0], t[1]))
        results = [{"id": rid, "content": row["content"], "score": float(s)} for s, _, rid, row in scored]
        return common.Response(
            200, {"mode_used": params.get("mode", "hybrid"), "results": results[: params["limit"]]}, 0.002
        )


def self_test() -> int:
    # metrics
    ranked = ["t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9", "t10", "t11", "t12"]
    assert recall_at(ranked, ["t3", "t11"], 5) == 0.5
    assert recall_at(ranked, ["t3", "t11"], 10) == 0.5
    assert recall_at(ranked, ["t3", "t11"], 20) == 1.0
    assert recall_at(ranked, ["t3", "t3"], 5) == 1.0  # repeated ids count once
    assert recall_at([], ["t1"], 5) == 0.0
    assert all_found_at(ranked, ["t3", "t11"], 10) == 0.0
    assert all_found_at(ranked, ["t3", "t10"], 10) == 1.0
    assert reciprocal_rank(ranked, ["t4", "t9"]) == 0.25
    assert reciprocal_rank(ranked, ["zz"]) == 0.0
    assert expand_to_turns(["m2", "mX", "m1"], {"m1": ["a"], "m2": ["b", "c"]}) == ["b", "c", "~mX", "a"]
    # distilled ingest: a second memory of an already-ranked turn keeps its rank (k counts memories)
    assert expand_to_turns(["m1", "m3", "m2"], {"m1": ["a"], "m3": ["a"], "m2": ["b"]}) == ["a", "~m3", "b"]
    assert recall_at(expand_to_turns(["m1", "m3", "m2"], {"m1": ["a"], "m3": ["a"], "m2": ["b"]}), ["b"], 2) == 0.0
    assert recall_at(expand_to_turns(["d1", "d2", "m1"], {"m1": ["a"]}), ["a"], 2) == 0.0
    agg = aggregate([{"scores": score_question(ranked, ["t1"])}, {"scores": score_question(ranked, ["t6", "t30"])}])
    assert agg["n"] == 2 and agg["r@5"] == 0.5 and agg["r@10"] == 0.75 and agg["all@10"] == 0.5
    assert abs(agg["mrr"] - (1.0 + 1 / 6) / 2) < 1e-9

    hits = [[50, ["a"]], [100, []], [40, ["b", "c"]], [500, ["d"]]]
    assert recall_within_tokens(hits, ["a", "b"], 128) == 0.5
    assert recall_within_tokens(hits, ["a", "c"], 190) == 1.0
    assert recall_within_tokens(hits, ["d"], 10_000) == 1.0 and recall_within_tokens(hits, ["a"], 10) == 0.0

    # variants
    vs = parse_variants(
        '{"rrf_k": 10, "weights": {"vector": 1.0}}', ['a={"fusion": "score"}', 'b={"weights": {"graph": 0}}']
    )
    assert [v.name for v in vs] == ["a", "b"]
    assert vs[0].ranking == {"rrf_k": 10, "weights": {"vector": 1.0}, "fusion": "score"}
    assert vs[1].ranking == {"rrf_k": 10, "weights": {"vector": 1.0, "graph": 0}}
    assert parse_variants(None, [])[0].ranking is None

    # dataset
    dataset = load_dataset(DEFAULT_DATASET)
    summary = dataset.summary()
    assert summary["conversations"] == 12 and summary["questions"] >= 200, summary
    conv = dataset.conversations[0]
    mems = session_memories(conv["sessions"][0])
    assert mems[0]["created_at"] == common.iso(common.parse_iso(conv["sessions"][0]["started_at"]))
    assert mems[1]["created_at"] == common.iso(
        common.parse_iso(conv["sessions"][0]["started_at"]) + timedelta(minutes=1)
    )
    assert mems[0]["metadata"] == {"turn_id": conv["sessions"][0]["turns"][0]["id"]}
    assert {m["attributed_to"] for m in mems} == {"user", "assistant"}
    assert all(m["run_id"] == conv["sessions"][0]["id"] for m in mems)

    # the pipeline against the fake server, on two conversations
    small = dataset.subset(["c01", "c02"])
    fake = _FakeClient()
    variants = [Variant("default", None), Variant("rrf60", {"fusion": "rrf", "rrf_k": 60})]
    ingested, records = evaluate(fake, small, variants, ["keyword", "hybrid"], 20, "selftest", progress=False)
    assert len(records) == 2 * 2 * len(small.questions)
    assert all(s["now"] for s in fake.searches) and all(s["limit"] == 20 for s in fake.searches)
    assert {json.dumps(s.get("ranking"), sort_keys=True) for s in fake.searches} == {
        "null",
        '{"fusion": "rrf", "rrf_k": 60}',
    }
    c01 = ingested["c01"]
    assert len(c01.turn_memory) == sum(len(s["turns"]) for s in small.conversations[0]["sessions"])
    assert all(0.0 <= r["scores"]["r@5"] <= r["scores"]["r@10"] <= r["scores"]["r@20"] <= 1.0 for r in records)
    report = render_report(
        dataset=small,
        records=records,
        variants=variants,
        modes=["keyword", "hybrid"],
        ingest=ingested,
        target_description="fake in-process client",
        machine=common.machine_info(),
        command="python bench/eval_retrieval.py --self-test",
        limit=20,
    )
    assert "## Variant `rrf60`" in report and "| paraphrase |" in report

    # distractors: generated rows in front of the turns, keeping their ranks
    corpus = [
        {"content": f"Someone else {i} talks about piano teachers and Lisbon.", "attributed_to": "user",
         "run_id": f"r{i // 3}", "created_at": "2023-01-01T00:00:00Z"}
        for i in range(10)
    ]  # fmt: skip
    assert [len(b) for b in _runs(corpus)] == [3, 3, 3, 1]
    fake2 = _FakeClient()
    one = dataset.subset(["c01"])
    ing2, recs2 = evaluate(fake2, one, variants[:1], ["keyword"], 20, "d", progress=False, distractors=[corpus])
    assert ing2["c01"].distractors == 10 and len(fake2.buckets["b1"]) == 10 + len(ing2["c01"].turn_memory)
    assert any(t.startswith("~") for r in recs2 for t in r["ranked_turns"])
    overall = aggregate(r for r in records if r["variant"] == "default" and r["mode"] == "keyword")
    print(report)
    print(
        f"self-test passed: {len(records)} fake searches; word-overlap baseline on c01+c02 "
        f"r@10={overall['r@10']:.3f}, p50 fake latency {statistics.median(r['latency_ms'] for r in records):.1f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
