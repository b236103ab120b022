"""Retrieval quality on LoCoMo-format data, through Engram's HTTP API, under the public protocol.

LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM Agents",
ACL 2024, arXiv:2402.17753) is the long-conversation memory benchmark that peers publish on.
Its data is licensed CC BY-NC 4.0 and is **not** part of this repository: download
``data/locomo10.json`` from the authors' repository (snap-research/LoCoMo) and give its path.
Reports hold figures only, never text from the data.

The protocol (the one Engram is judged by):

- each conversation is one bucket; every dialogue turn is one memory, written through
  ``POST /buckets/{id}/memories``, one request per session, turns in order, each with
  ``content`` = ``"<speaker>: <text>"`` (plus ``" [shares photo: <caption>]"`` when the turn has
  an image caption), ``created_at`` = the session's date and time (``"1:56 pm on 8 May, 2023"``,
  sent as ISO 8601 without a zone), ``metadata`` = ``{"dia_id", "speaker"}`` and nothing else;
- every question except category 5 (adversarial) is one ``POST /buckets/{id}/search`` with
  ``{"query": <question>, "limit": 20}`` and nothing else (a variant or mode adds its own
  fields); the evidence turns' ``dia_id``s are scored: recall@5/10/20, all@10, MRR (as in
  ``eval_retrieval.py``), by category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop);
- malformed evidence ids are repaired (``"D8:6; D9:17"`` is two, ``"D:11:26"`` is ``D11:26``,
  ``"D30:05"`` is ``D30:5``) and ids that name no turn are dropped.

    python bench/eval_locomo.py --dataset ~/data/locomo10.json
    python bench/eval_locomo.py --dataset locomo10.json --modes keyword,vector,hybrid,graph \\
        --variant default='{}' --variant score='{"fusion": "score"}'
    python bench/eval_locomo.py --self-test          # offline checks on a small invented sample
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import common
import eval_retrieval as er

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
DATE_FORMAT = "%I:%M %p on %d %B, %Y"
_SESSION = re.compile(r"session_(\d+)")
_DIA = re.compile(r"D:?(\d+):0*(\d+)")


@dataclass
class Conversation:
    id: str
    sessions: list[tuple[str, list[dict]]]  # (ISO time, memories in turn order)
    dia_ids: list[str]  # per memory of sessions, in the same order


@dataclass
class LocomoSet:
    path: Path
    conversations: list[Conversation]
    questions: list[dict]  # {"id", "conversation_id", "question", "category", "type", "evidence"}
    dropped_evidence: int = 0
    skipped_adversarial: int = 0
    types: dict[str, int] = field(default_factory=dict)


def repair_evidence(raw: list[str], known: set[str]) -> tuple[list[str], int]:
    """The evidence ids a question names, repaired; and how many named no turn."""
    ids: list[str] = []
    dropped = 0
    for item in raw:
        for part in re.split(r"[;,\s]+", str(item)):
            if not part:
                continue
            match = _DIA.fullmatch(part)
            dia = f"D{int(match.group(1))}:{int(match.group(2))}" if match else None
            if dia in known:
                if dia not in ids:
                    ids.append(dia)
            else:
                dropped += 1
    return ids, dropped


def turn_content(turn: dict) -> str:
    content = f"{turn['speaker']}: {turn['text']}"
    if turn.get("blip_caption"):
        content += f" [shares photo: {turn['blip_caption']}]"
    return content


def load_locomo(path: Path) -> LocomoSet:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, list) or not data or "conversation" not in data[0]:
        raise SystemExit(f"{path}: not a LoCoMo-format file (a list of samples with 'conversation' and 'qa')")
    conversations, questions = [], []
    dropped = adversarial = 0
    for sample in data:
        conv = sample["conversation"]
        numbers = sorted(int(m.group(1)) for key in conv if (m := _SESSION.fullmatch(key)) and conv[key])
        sessions, dia_ids = [], []
        for n in numbers:
            when = datetime.strptime(conv[f"session_{n}_date_time"], DATE_FORMAT)
            memories = []
            for turn in conv[f"session_{n}"]:
                memories.append(
                    {
                        "content": turn_content(turn),
                        "created_at": when.isoformat(),
                        "metadata": {"dia_id": turn["dia_id"], "speaker": turn["speaker"]},
                    }
                )
                dia_ids.append(turn["dia_id"])
            sessions.append((when.isoformat(), memories))
        cid = str(sample.get("sample_id", f"conv-{len(conversations)}"))
        conversations.append(Conversation(cid, sessions, dia_ids))
        known = set(dia_ids)
        for i, qa in enumerate(sample["qa"]):
            if qa.get("category") == 5:
                adversarial += 1
                continue
            evidence, lost = repair_evidence(qa.get("evidence") or [], known)
            dropped += lost
            if not evidence:
                continue
            category = int(qa["category"])
            questions.append(
                {
                    "id": f"{cid}#{i}",
                    "conversation_id": cid,
                    "question": qa["question"],
                    "category": category,
                    "type": CATEGORIES.get(category, str(category)),
                    "evidence": evidence,
                }
            )
    types: dict[str, int] = defaultdict(int)
    for q in questions:
        types[q["type"]] += 1
    return LocomoSet(Path(path), conversations, questions, dropped, adversarial, dict(types))


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------


def ingest(client: Any, dataset: LocomoSet, prefix: str, progress: bool = True) -> dict[str, er.IngestedConversation]:
    """One bucket per conversation, one request per session (turns in order)."""
    ingested: dict[str, er.IngestedConversation] = {}
    for conv in dataset.conversations:
        bucket_id = client.create_bucket(f"{prefix}-{conv.id}")
        batches, position = [], 0
        for _when, memories in conv.sessions:
            batches.append((conv.id, memories, conv.dia_ids[position : position + len(memories)]))
            position += len(memories)
        ingested[conv.id] = written = er.ingest_batches(client, conv.id, bucket_id, batches)
        if progress:
            common.log(f"ingested {conv.id}: {position} turns in {len(conv.sessions)} requests, {written.seconds:.1f}s")
    return ingested


def run_searches(
    client: Any,
    dataset: LocomoSet,
    ingested: dict[str, er.IngestedConversation],
    variants: list[er.Variant],
    modes: list[str],
    limit: int = 20,
    progress: bool = True,
) -> list[dict]:
    records: list[dict] = []
    total = len(variants) * len(modes) * len(dataset.questions)
    for variant in variants:
        for mode in modes:
            extra = er.search_body(variant, mode)
            first = dataset.questions[0]
            client.search(ingested[first["conversation_id"]].bucket_id, first["question"], limit=limit, **extra)
            for q in dataset.questions:
                conv = ingested[q["conversation_id"]]
                resp = client.search(conv.bucket_id, q["question"], limit=limit, **extra)
                ranked = er.expand_to_turns([str(h["id"]) for h in resp.data["results"]], conv.memory_turns)
                records.append(
                    {
                        "variant": variant.name,
                        "mode": mode,
                        "mode_used": resp.data.get("mode_used", mode),
                        "question_id": q["id"],
                        "type": q["type"],
                        "conversation_id": q["conversation_id"],
                        "evidence": q["evidence"],
                        "ranked_turns": ranked[:limit],
                        "scores": er.score_question(ranked, q["evidence"]),
                        "latency_ms": resp.elapsed * 1000.0,
                    }
                )
                if progress and len(records) % 200 == 0:
                    common.log(f"searched {len(records)}/{total}")
    return records


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def summary_rows(records: list[dict], variants: list[er.Variant], modes: list[str]) -> list[list[Any]]:
    rows = []
    by_key: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in records:
        by_key[(r["variant"], r["mode"])].append(r)
    for v in variants:
        for mode in modes:
            recs = by_key[(v.name, mode)]
            agg = er.aggregate(recs)
            lat = common.latency_summary([r["latency_ms"] / 1000.0 for r in recs])
            per_type = [er.aggregate(r for r in recs if r["type"] == t)["r@10"] for t in CATEGORIES.values()]
            rows.append(
                [v.name, mode, *(er._fmt(agg[m]) for m in er.METRICS), *(er._fmt(x) for x in per_type),
                 f"{lat.get('p50', float('nan')):.1f}", f"{lat.get('p95', float('nan')):.1f}"]
            )  # fmt: skip
    return rows


SUMMARY_HEADERS = ["variant", "mode", *er.METRICS, *(f"{t} r@10" for t in CATEGORIES.values()), "p50 ms", "p95 ms"]


def render_report(
    dataset: LocomoSet,
    records: list[dict],
    variants: list[er.Variant],
    modes: list[str],
    ingested: dict[str, er.IngestedConversation],
    description: str,
    machine: dict[str, Any],
    command: str,
) -> str:
    turns = sum(len(c.dia_ids) for c in dataset.conversations)
    sessions = sum(len(c.sessions) for c in dataset.conversations)
    types = ", ".join(f"{t} {dataset.types.get(t, 0)}" for t in CATEGORIES.values())
    lines = [
        f"# Retrieval quality: LoCoMo protocol ({machine['date'][:10]})",
        "",
        "## Setup",
        "",
        common.machine_markdown(machine),
        f"- server: {description}",
        f"- command: `{command}`",
        "",
        "## Data",
        "",
        f"- a LoCoMo-format file (`{dataset.path.name}`, not part of this repository): "
        f"{len(dataset.conversations)} conversations, {sessions} sessions, {turns} turns "
        f"({sum(c.deduplicated for c in ingested.values())} deduplicated on write), {len(dataset.questions)} "
        f"questions ({types}); {dataset.skipped_adversarial} adversarial questions skipped, "
        f"{dataset.dropped_evidence} evidence ids that name no turn dropped",
        "- one bucket per conversation, one write request per session; each search sends the question and "
        "`limit` 20 only (plus the variant's `ranking` and a non-default `mode`); recall@k = share of evidence "
        "turns in the top k; all@10 = share of questions with all evidence in the top 10; MRR over the top 20",
        "",
        "## Results",
        "",
        common.markdown_table(SUMMARY_HEADERS, summary_rows(records, variants, modes), "ll" + "r" * 12),
        "",
    ]
    for v in variants:
        ranking = json.dumps(v.ranking, sort_keys=True) if v.ranking else "server defaults"
        lines.append(f"- `{v.name}`: ranking `{ranking}`")
    lines.append("")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--modes", default="hybrid", help="comma-separated, from keyword,vector,hybrid,graph")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=JSON", help="ranking overrides")
    parser.add_argument("--ranking", help="JSON object of ranking overrides every variant extends")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, help="a LoCoMo-format JSON file (e.g. locomo10.json)")
    add_arguments(parser)
    parser.add_argument("--out", type=Path, help="report path (default bench/results/locomo-<date>.md)")
    parser.add_argument("--no-write", action="store_true", help="print the report only")
    parser.add_argument("--json-out", type=Path, help="also write every per-question result here")
    parser.add_argument("--self-test", action="store_true", help="offline checks on an invented sample, then exit")
    common.add_server_args(parser)
    args = parser.parse_args(argv)
    if args.self_test:
        return self_test()
    if not args.dataset:
        parser.error("--dataset is required (download data/locomo10.json from the LoCoMo authors' repository)")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or set(modes) - set(er.ALL_MODES):
        parser.error(f"modes are {er.ALL_MODES}")
    variants = er.parse_variants(args.ranking, args.variant)
    dataset = load_locomo(args.dataset)
    machine, command = common.machine_info(), common.command_line()
    prefix = f"locomo-{datetime.now().strftime('%Y%m%d%H%M%S')}"
    ingested: dict[str, er.IngestedConversation] = {}
    with common.server_from_args(args) as target, target.client() as client:
        try:
            ingested.update(ingest(client, dataset, prefix))
            records = run_searches(client, dataset, ingested, variants, modes)
        finally:
            if not target.private:
                for conv in ingested.values():
                    client.delete_bucket(conv.bucket_id)
        description = target.describe()
    report = render_report(dataset, records, variants, modes, ingested, description, machine, command)
    first = variants[0].name
    recall = {m: er.aggregate([r for r in records if r["variant"] == first and r["mode"] == m])["r@10"] for m in modes}
    headline = f"recall@10 of {first}: " + ", ".join(f"{m} {value:.3f}" for m, value in recall.items())
    header = common.report_header(__file__, headline, series=args.dataset.stem, info=machine, command=command)
    common.publish_report(report, out=args.out, name="locomo", no_write=args.no_write, header=header)
    if args.json_out:
        args.json_out.write_text(json.dumps({"machine": machine, "records": records}), encoding="utf-8")
    return 0


def self_test() -> int:
    """The loader, the evidence repair and the protocol's request bodies, on an invented sample."""
    sample = [
        {
            "sample_id": "s1",
            "conversation": {
                "speaker_a": "Ana",
                "speaker_b": "Ben",
                "session_2_date_time": "9:05 am on 3 June, 2024",
                "session_2": [{"speaker": "Ben", "dia_id": "D2:1", "text": "Back from Porto."}],
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": [
                    {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a cat."},
                    {"speaker": "Ben", "dia_id": "D1:2", "text": "Nice!", "blip_caption": "a grey cat"},
                ],
            },
            "qa": [
                {"question": "What did Ana adopt?", "evidence": ["D1:1"], "category": 4},
                {"question": "Where was Ben?", "evidence": ["D1:02; D2:1", "D:1:1", "D9:9", "D"], "category": 1},
                {"question": "Trick?", "evidence": ["D1:1"], "category": 5},
                {"question": "Nothing?", "evidence": ["D7:1"], "category": 2},
            ],
        }
    ]
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(sample, fh)
    data = load_locomo(Path(fh.name))
    Path(fh.name).unlink()
    conv = data.conversations[0]
    assert [s[0] for s in conv.sessions] == ["2023-05-08T13:56:00", "2024-06-03T09:05:00"], conv.sessions
    assert conv.dia_ids == ["D1:1", "D1:2", "D2:1"]
    first = conv.sessions[0][1]
    assert first[0] == {
        "content": "Ana: I adopted a cat.",
        "created_at": "2023-05-08T13:56:00",
        "metadata": {"dia_id": "D1:1", "speaker": "Ana"},
    }
    assert first[1]["content"] == "Ben: Nice! [shares photo: a grey cat]"
    assert [q["evidence"] for q in data.questions] == [["D1:1"], ["D1:2", "D2:1", "D1:1"]]
    assert data.skipped_adversarial == 1 and data.dropped_evidence == 3, data
    assert [q["type"] for q in data.questions] == ["single-hop", "multi-hop"]
    assert er.search_body(er.Variant("default", None), "hybrid") == {}
    assert er.search_body(er.Variant("k", {"fusion": "score"}), "keyword") == {
        "mode": "keyword",
        "ranking": {"fusion": "score"},
    }
    print("self-test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
