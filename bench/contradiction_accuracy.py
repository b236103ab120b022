"""Precision and recall of the conflict detector (maintenance/conflict_detector.py) on a
hand-labelled set of memory pairs.

    ./engram bench contradiction_accuracy.py                      # print the report
    ./engram bench contradiction_accuracy.py --out bench/results/contradictions-2026-11-26.md
    ./engram bench contradiction_accuracy.py --show-errors --half dev

The set (bench/contradictions/pairs.jsonl) holds pairs written for this purpose: positives
labelled with the cue a reader would name (``diet``, ``one_value``, ``negation``,
``antonym``, or ``world`` for contradictions only world knowledge shows) and hard
negatives labelled with why they are *not* contradictions (``paraphrase``,
``compatible``, ``other_subject``, ``hedged``, ``update``: a change over time that the
knowledge graph's timelines handle). A fixed seed splits it in two halves: the
detector's rules were adjusted looking at the ``dev`` half only; ``held-out`` is
reported as it came out.

No database, no model: the detector is plain Python. ``--similarity`` also embeds both sides
of every pair with the embedding model and reports how many contradictions the background
check would show the detector at all (cosine at or above its candidate floor; in a real
bucket a pair must also be among each other's 10 nearest neighbours).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections import Counter
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))

import common  # noqa: E402 - bench/, beside this script

from maintenance.conflict_detector import (  # noqa: E402
    CANDIDATE_MIN_SIMILARITY,
    CUES,
    DETECTOR_VERSION,
    detect,
    diet_probe,
    words,
)

SEED = 20261126


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def split(pairs: list[dict]) -> dict[str, list[dict]]:
    order = list(range(len(pairs)))
    random.Random(SEED).shuffle(order)
    half = len(order) // 2
    return {"dev": [pairs[i] for i in sorted(order[:half])], "held-out": [pairs[i] for i in sorted(order[half:])]}


def prf(tp: int, fp: int, fn: int) -> tuple[float, float, float]:
    p = tp / (tp + fp) if tp + fp else float("nan")
    r = tp / (tp + fn) if tp + fn else float("nan")
    f = 2 * p * r / (p + r) if tp else 0.0
    return p, r, f


def evaluate(pairs: list[dict]) -> dict:
    rows = []
    for pair in pairs:
        finding = detect(pair["a"], pair["b"])
        rows.append({**pair, "found": finding.code if finding else None, "reason": finding.reason if finding else ""})
    tp = sum(1 for r in rows if r["label"] and r["found"])
    fp = sum(1 for r in rows if not r["label"] and r["found"])
    fn = sum(1 for r in rows if r["label"] and not r["found"])
    per_cue = {}
    for cue in CUES:
        raised = [r for r in rows if r["found"] == cue]
        labelled = [r for r in rows if r["label"] and r["kind"] == cue]
        per_cue[cue] = {
            "raised": len(raised),
            "raised_correct": sum(1 for r in raised if r["label"]),
            "labelled": len(labelled),
            "labelled_found": sum(1 for r in labelled if r["found"]),
        }
    negatives = Counter(r["kind"] for r in rows if not r["label"])
    false_by_kind = Counter(r["kind"] for r in rows if not r["label"] and r["found"])
    return {
        "rows": rows,
        "n": len(rows),
        "positives": sum(1 for r in rows if r["label"]),
        "tp": tp, "fp": fp, "fn": fn,
        "prf": prf(tp, fp, fn),
        "per_cue": per_cue,
        "negatives": negatives,
        "false_by_kind": false_by_kind,
        "world": sum(1 for r in rows if r["label"] and r["kind"] == "world"),
        "world_found": sum(1 for r in rows if r["label"] and r["kind"] == "world" and r["found"]),
    }  # fmt: skip


def similarities(pairs: list[dict]) -> list[float]:
    """Cosine similarity of each pair's two texts, with Engram's embedding model."""
    import django
    import numpy as np
    from django.conf import settings

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    settings.configure(ENGRAM_EMBEDDINGS_ENABLED=True)
    django.setup()
    from engram_site.providers.embedding import embed_texts

    vectors = embed_texts([p["a"] for p in pairs] + [p["b"] for p in pairs])
    a, b = vectors[: len(pairs)], vectors[len(pairs) :]
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return [float(x) for x in (a * b).sum(axis=1)]


def similarity_report(pairs: list[dict], sims: list[float]) -> list[str]:
    lines = [
        "",
        "## Would the background check show the pair to the detector?",
        "",
        f"Cosine similarity of the two texts (Engram's embedding model); the check compares a memory with its 10 "
        f"nearest neighbours at or above {CANDIDATE_MIN_SIMILARITY}.",
        "",
        "| pairs | n | min | median | at or above the floor |",
        "|---|---|---|---|---|",
    ]
    for label, keep in (("contradictions", 1), ("hard negatives", 0)):
        values = sorted(s for p, s in zip(pairs, sims, strict=True) if p["label"] == keep)
        above = sum(1 for s in values if s >= CANDIDATE_MIN_SIMILARITY)
        lines.append(f"| {label} | {len(values)} | {values[0]:.2f} | {values[len(values) // 2]:.2f} | {above} |")
    found = [(p, s) for p, s in zip(pairs, sims, strict=True) if p["label"] and detect(p["a"], p["b"])]
    below = [p for p, s in found if s < CANDIDATE_MIN_SIMILARITY]

    def probed(p) -> bool:  # the diet probe's words (lemmas in the database; plain words here)
        return bool(diet_probe(p["a"]) & set(words(p["b"])) or diet_probe(p["b"]) & set(words(p["a"])))

    lost = [p for p in below if not probed(p)]
    lines += [
        "",
        f"Contradictions the detector finds but the similarity floor would hide: {len(below)} of {len(found)}; "
        f"of those, the diet probe (a full-text search of the bucket for the foods a diet excludes, or for "
        f"diet words) still shows it the pair for {len(below) - len(lost)}.",
    ]
    lines += [f"- not shown: “{p['a']}” / “{p['b']}”" for p in lost]
    return lines


def _pct(x: float) -> str:
    return "n/a" if x != x else f"{x:.2f}"


def report(results: dict[str, dict], total: int) -> str:
    lines = [
        "# Contradiction detector: precision and recall (2026-11-26)",
        "",
        f"Detector: `maintenance/conflict_detector.py` version {DETECTOR_VERSION} (rules, no model). "
        f"Set: `bench/contradictions/pairs.jsonl`, {total} hand-written pairs, split in two halves by seed {SEED}; "
        "the rules were adjusted on the dev half only. Machine: 2 cores, CPU only (the detector needs no model; "
        "the whole set runs in well under a second).",
        "",
        "Command: `./engram bench contradiction_accuracy.py --out bench/results/contradictions-2026-11-26.md`",
        "",
        "## Overall",
        "",
        "| half | pairs | contradictions | found (TP) | false alarms (FP) | missed (FN) | precision | recall | F1 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, res in results.items():
        p, r, f = res["prf"]
        lines.append(
            f"| {name} | {res['n']} | {res['positives']} | {res['tp']} | {res['fp']} | {res['fn']} | {_pct(p)} | "
            f"{_pct(r)} | {_pct(f)} |"
        )
    lines += [
        "",
        "Recall counts every labelled contradiction, including the `world` ones (a contradiction only world "
        'knowledge shows, e.g. "I\'ve never been to Japan" / "I visited Tokyo"), which no cue is meant to find.',
        "",
        "## Per cue",
        "",
        "Precision of a cue: of the pairs it raised, how many are contradictions. Recall of a cue: of the pairs "
        "labelled with that cue, how many were raised (by any cue).",
        "",
        "| half | cue | raised | correct | precision | labelled | found | recall |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, res in results.items():
        for cue, c in res["per_cue"].items():
            p = c["raised_correct"] / c["raised"] if c["raised"] else float("nan")
            r = c["labelled_found"] / c["labelled"] if c["labelled"] else float("nan")
            lines.append(
                f"| {name} | {cue} | {c['raised']} | {c['raised_correct']} | {_pct(p)} | {c['labelled']} | "
                f"{c['labelled_found']} | {_pct(r)} |"
            )
        lines.append(f"| {name} | world | 0 | 0 | n/a | {res['world']} | {res['world_found']} | "
                     f"{_pct(res['world_found'] / res['world'] if res['world'] else float('nan'))} |")  # fmt: skip
    lines += ["", "## Hard negatives", "", "| half | kind | pairs | raised (false alarms) |", "|---|---|---|---|"]
    for name, res in results.items():
        for kind, n in sorted(res["negatives"].items()):
            lines.append(f"| {name} | {kind} | {n} | {res['false_by_kind'].get(kind, 0)} |")
    lines += ["", "## Errors", ""]
    for name, res in results.items():
        errors = [r for r in res["rows"] if bool(r["found"]) != bool(r["label"])]
        lines.append(f"**{name}** ({len(errors)})")
        lines.append("")
        for r in errors:
            what = f"false alarm ({r['found']})" if r["found"] else f"missed ({r['kind']})"
            lines.append(f"- {what}: “{r['a']}” / “{r['b']}”")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(BENCH_DIR / "contradictions" / "pairs.jsonl"))
    parser.add_argument("--half", choices=["dev", "held-out", "both"], default="both")
    parser.add_argument("--show-errors", action="store_true")
    parser.add_argument("--out", help="write the markdown report here")
    parser.add_argument("--similarity", action="store_true", help="also embed the pairs (loads the model)")
    args = parser.parse_args()
    pairs = load(Path(args.data))
    halves = split(pairs)
    names = ["dev", "held-out"] if args.half == "both" else [args.half]
    results = {name: evaluate(halves[name]) for name in names}
    if len(names) == 2:
        results["all"] = evaluate(pairs)
    text = report(results, len(pairs))
    if args.similarity:
        text += "\n".join(similarity_report(pairs, similarities(pairs))) + "\n"
    if args.out:
        headline = "; ".join(
            f"{name}: precision {res['prf'][0]:.2f}, recall {res['prf'][1]:.2f}, F1 {res['prf'][2]:.2f}"
            for name, res in results.items()
        )
        header = common.report_header(__file__, headline)
        Path(args.out).write_text(f"{header}\n{text}\n")
    if args.show_errors or not args.out:
        print(text)
    else:
        for name, res in results.items():
            p, r, f = res["prf"]
            print(f"{name}: precision {_pct(p)} recall {_pct(r)} F1 {_pct(f)} ({res['n']} pairs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
