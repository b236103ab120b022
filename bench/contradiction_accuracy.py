"""Precision and recall of the conflict detector (maintenance/conflict_detector/) on a
hand-labelled set of memory pairs.

    ./engram bench contradiction_accuracy.py                      # print the report
    ./engram bench contradiction_accuracy.py --out bench/results/contradictions-2026-11-28.md
    ./engram bench contradiction_accuracy.py --show-errors --half dev

The set (bench/contradictions/pairs.jsonl) holds pairs written for this purpose: positives
labelled with the cue a reader would name (``diet``, ``one_value``, ``negation``,
``antonym``, ``quantity``, ``schedule``, or ``world`` for contradictions only world
knowledge shows) and hard negatives labelled with why they are *not* contradictions
(``paraphrase``, ``compatible``, ``other_subject``, ``hedged``, ``dated``: the two sides
state different times, ``update``: a change that leaves the older memory true, or one
the knowledge graph's timelines handle). ``a`` is the older memory, as the background
check passes them; every pair is also run in the other order.

Each pair carries its half (``half``: ``dev`` or ``held-out``) and the day it was added
(``added``). The pairs of 2026-11-26 were split by seed 20261126, the pairs added on
2026-11-28 by seed 20261128 among themselves, so adding pairs never moves one from a half
to the other. The detector's rules were adjusted looking at the ``dev`` half only;
``held-out`` is reported as it came out.

No database, no model: the detector is plain Python. ``--similarity`` also embeds both sides
of every pair with the embedding model and reports how many contradictions the background
check would show the detector at all: among a new memory's 10 nearest neighbours (cosine at
or above the candidate floor) in a bucket that also holds another user's 509 memories, or
found by the detector's full-text probes. ``--unlabelled`` runs the detector on pairs nobody
labelled (one user's turns in our two conversational sets, one person's memories in the
generated corpus) and lists what it raises: false alarms in the wild, or contradictions the
data happens to hold.
"""

from __future__ import annotations

import argparse
import itertools
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
    CANDIDATE_K,
    CANDIDATE_MIN_SIMILARITY,
    CUES,
    DETECTOR_VERSION,
    detect,
    probes,
    words,
)

HALVES = ("dev", "held-out")
# The seed that split each day's additions in two halves (recorded in the pairs' ``half``).
SEEDS = {"2026-11-26": 20261126, "2026-11-28": 20261128}
LATEST = max(SEEDS)


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def assign_halves(pairs: list[dict], *, seed: int) -> None:
    """Give pairs without a ``half`` one: a seeded shuffle of them, the second half held out."""
    new = [p for p in pairs if "half" not in p]
    order = list(range(len(new)))
    random.Random(seed).shuffle(order)
    for rank, i in enumerate(order):
        new[i]["half"] = "held-out" if rank >= len(new) // 2 else "dev"


def split(pairs: list[dict]) -> dict[str, list[dict]]:
    unknown = {p.get("half") for p in pairs} - set(HALVES)
    if unknown:
        raise SystemExit(f"pairs without a known half: {unknown} (see assign_halves)")
    return {name: [p for p in pairs if p["half"] == name] for name in HALVES}


def prf(tp: int, fp: int, fn: int) -> tuple[float, float, float]:
    p = tp / (tp + fp) if tp + fp else float("nan")
    r = tp / (tp + fn) if tp + fn else float("nan")
    f = 2 * p * r / (p + r) if tp else 0.0
    return p, r, f


def evaluate(pairs: list[dict]) -> dict:
    rows = []
    for pair in pairs:
        finding = detect(pair["a"], pair["b"])
        reverse = detect(pair["b"], pair["a"])
        rows.append({
            **pair, "found": finding.code if finding else None, "reason": finding.reason if finding else "",
            "reverse": reverse.code if reverse else None,
        })  # fmt: skip
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
        "order_differs": [r for r in rows if bool(r["found"]) != bool(r["reverse"])],
        "world": sum(1 for r in rows if r["label"] and r["kind"] == "world"),
        "world_found": sum(1 for r in rows if r["label"] and r["kind"] == "world" and r["found"]),
    }  # fmt: skip


def _embedder():
    import django
    from django.conf import settings

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    settings.configure(ENGRAM_EMBEDDINGS_ENABLED=True)
    django.setup()
    from engram_site.providers.embedding import embed_texts

    return embed_texts


def _unit(vectors):
    import numpy as np

    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


# Other people's memories for a pair to compete with for the ten nearest places: the user turns of
# our conversational evaluation set (another user's life, the same kind of text).
POOL = BENCH_DIR / "eval" / "conversations.json"


def pool_texts() -> list[str]:
    sessions = [s for c in json.loads(POOL.read_text())["conversations"] for s in c["sessions"]]
    return [t["content"] for s in sessions for t in s["turns"] if t["role"] == "user"]


def similarities(pairs: list[dict]) -> dict:
    """Each pair's cosine similarity, and how many of the pool's memories are nearer to the newer
    side (``b``) than the older (``a``) is, with Engram's embedding model."""
    embed = _embedder()
    a = _unit(embed([p["a"] for p in pairs]))
    b = _unit(embed([p["b"] for p in pairs]))
    pool = _unit(embed(pool_texts()))
    sims = (a * b).sum(axis=1)
    nearer = [int((pool @ b[i] > sims[i]).sum()) for i in range(len(pairs))]
    return {"sims": [float(x) for x in sims], "nearer": nearer, "pool": len(pool)}


def _probed(p: dict) -> bool:
    """Would the newer side's probes find the older by full text (plain words here, lemmas in the
    database)?"""
    older = set(words(p["a"])) | {w.rstrip("s") for w in words(p["a"])}
    return any(group & older for group in probes(p["b"]))


def similarity_report(pairs: list[dict], measured: dict) -> list[str]:
    sims, nearer = measured["sims"], measured["nearer"]
    lines = [
        "",
        "## Would the background check show the pair to the detector?",
        "",
        f"The check shows a new memory (`b`) its {CANDIDATE_K} nearest neighbours in its bucket at cosine "
        f"{CANDIDATE_MIN_SIMILARITY} or more (Engram's embedding model), and the memories its probes find by full "
        "text (`conflict_detector.probes`: the foods a diet excludes, the relationship statuses that contradict "
        "a stated one, the statement's content words). Cosine similarity of the two sides:",
        "",
        "| pairs | n | min | median | at or above the floor |",
        "|---|---|---|---|---|",
    ]
    for label, keep in (("contradictions", 1), ("hard negatives", 0)):
        values = sorted(s for p, s in zip(pairs, sims, strict=True) if p["label"] == keep)
        above = sum(1 for s in values if s >= CANDIDATE_MIN_SIMILARITY)
        lines.append(f"| {label} | {len(values)} | {values[0]:.2f} | {values[len(values) // 2]:.2f} | {above} |")
    found = [i for i, p in enumerate(pairs) if p["label"] and detect(p["a"], p["b"])]
    near = [i for i in found if sims[i] >= CANDIDATE_MIN_SIMILARITY and nearer[i] < CANDIDATE_K]
    alone = [i for i in found if sims[i] >= CANDIDATE_MIN_SIMILARITY]
    probed = [i for i in found if _probed(pairs[i])]
    shown = [i for i in found if i in near or i in probed]
    lines += [
        "",
        f"Of the {len(found)} contradictions the detector finds, the older side is among the newer's "
        f"{CANDIDATE_K} nearest neighbours at the floor or above for {len(alone)} in a bucket of the two alone, "
        f"and for {len(near)} in a bucket that also holds the {measured['pool']} user turns of "
        "`bench/eval/conversations.json` (another user's life). The probes find the older side by its words for "
        f"{len(probed)}; by either way the pair is shown for {len(shown)} of {len(found)}.",
    ]
    lines += [f"- not shown: “{pairs[i]['a']}” / “{pairs[i]['b']}”" for i in found if i not in shown]
    return lines


# Unlabelled pairs: what the detector raises among memories nobody wrote to contradict each other.
LONG_SESSIONS = BENCH_DIR / "eval" / "long" / "sessions.json"
CORPUS = BENCH_DIR / "data" / "corpus-100k.jsonl"


def unlabelled_sets() -> dict[str, list[tuple[str, str]]]:
    """Every pair of one user's turns in our two conversational sets, and (when bench/data holds
    the generated corpus) up to 40,000 pairs of memories about one person from it."""
    sets: dict[str, list[tuple[str, str]]] = {}
    conversations = json.loads(POOL.read_text())["conversations"]
    sets["our set: pairs of one user's turns"] = [
        pair for c in conversations
        for pair in itertools.combinations(
            [t["content"] for s in c["sessions"] for t in s["turns"] if t["role"] == "user"], 2)
    ]  # fmt: skip
    sessions = json.loads(LONG_SESSIONS.read_text())["conversations"]
    sets["long sessions: pairs of one user's messages"] = [
        pair for c in sessions
        for pair in itertools.combinations(
            [m["content"] for s in c["sessions"] for m in s["messages"] if m["role"] == "user"], 2)
    ]  # fmt: skip
    if CORPUS.exists():
        by_person: dict[str, list[str]] = {}
        for line in CORPUS.read_text().splitlines():
            content = json.loads(line)["content"]
            by_person.setdefault(content.split()[0], []).append(content)
        rng = random.Random(1)
        pairs = []
        for items in by_person.values():
            candidates = list(itertools.combinations(items[:60], 2))
            pairs += rng.sample(candidates, min(300, len(candidates)))
        sets["corpus-100k: pairs of memories about one person"] = pairs[:40_000]
    return sets


def unlabelled_report() -> list[str]:
    lines = [
        "",
        "## Unlabelled pairs",
        "",
        "What the detector raises among memories nobody wrote to contradict each other (each pair in the order "
        "given; the corpus is `make_corpus.py --rows 100000 --seed 1`, pairs drawn with seed 1).",
        "",
        "| pairs | n | raised |",
        "|---|---|---|",
    ]
    raised_all = []
    for name, pairs in unlabelled_sets().items():
        raised = [(a, b, f) for a, b in pairs if (f := detect(a, b))]
        raised_all += raised
        lines.append(f"| {name} | {len(pairs)} | {len(raised)} |")
    lines.append("")
    lines += [f"- {f.code}: “{a[:160]}” / “{b[:160]}”" for a, b, f in raised_all]
    return lines


def _pct(x: float) -> str:
    return "n/a" if x != x else f"{x:.2f}"


def report(results: dict[str, dict], total: int, *, date: str) -> str:
    seeds = ", ".join(f"{day}: seed {seed}" for day, seed in SEEDS.items())
    lines = [
        f"# Contradiction detector: precision and recall ({date})",
        "",
        f"Detector: `maintenance/conflict_detector/` version {DETECTOR_VERSION} (rules, no model). "
        f"Set: `bench/contradictions/pairs.jsonl`, {total} hand-written pairs, each day's additions split in two "
        f"halves by a fixed seed ({seeds}); the rules were adjusted on the dev half only. "
        f"`held-out, added {LATEST}` is the part of the held-out half added on {LATEST}, written before the rules "
        "of this version and never shown to them before this run. Machine: 2 cores, CPU only (the detector needs "
        "no model; the whole set runs in about a second).",
        "",
        "## Overall",
        "",
        "A pair is found when `detect(a, b)` raises it, `a` being the older memory (the order the background "
        "check uses); the last column counts the pairs whose other order, `detect(b, a)`, answers differently.",
        "",
        "| half | pairs | contradictions | found (TP) | false alarms (FP) | missed (FN) | precision | recall | F1 "
        "| order differs |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, res in results.items():
        p, r, f = res["prf"]
        lines.append(
            f"| {name} | {res['n']} | {res['positives']} | {res['tp']} | {res['fp']} | {res['fn']} | {_pct(p)} | "
            f"{_pct(r)} | {_pct(f)} | {len(res['order_differs'])} |"
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
        if name == "all" or name.startswith("held-out, added"):
            continue  # the same rows as the halves
        errors = [r for r in res["rows"] if bool(r["found"]) != bool(r["label"])]
        lines.append(f"**{name}** ({len(errors)})")
        lines.append("")
        for r in errors:
            what = f"false alarm ({r['found']})" if r["found"] else f"missed ({r['kind']})"
            lines.append(f"- {what}: “{r['a']}” / “{r['b']}”")
        lines.append("")
        if res["order_differs"]:
            lines.append(f"Found in one order only ({len(res['order_differs'])}):")
            lines.append("")
            for r in res["order_differs"]:
                lines.append(f"- {r['found'] or 'nothing'} / reversed {r['reverse'] or 'nothing'}: "
                             f"“{r['a']}” / “{r['b']}”")  # fmt: skip
            lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(BENCH_DIR / "contradictions" / "pairs.jsonl"))
    parser.add_argument("--half", choices=["dev", "held-out", "both"], default="both")
    parser.add_argument("--show-errors", action="store_true")
    parser.add_argument("--out", help="write the markdown report here")
    parser.add_argument("--similarity", action="store_true", help="also embed the pairs (loads the model)")
    parser.add_argument("--unlabelled", action="store_true", help="also run the detector on unlabelled pairs")
    parser.add_argument(
        "--assign-halves", type=int, metavar="SEED",
        help="give the pairs that have no half one (a shuffle by SEED), write the file, and stop",
    )  # fmt: skip
    args = parser.parse_args()
    pairs = load(Path(args.data))
    if args.assign_halves is not None:
        assign_halves(pairs, seed=args.assign_halves)
        Path(args.data).write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pairs))
        print(f"{sum(1 for p in pairs if p['half'] == 'held-out')} of {len(pairs)} pairs held out")
        return 0
    halves = split(pairs)
    names = list(HALVES) if args.half == "both" else [args.half]
    results = {name: evaluate(halves[name]) for name in names}
    if "held-out" in names:
        results[f"held-out, added {LATEST}"] = evaluate([p for p in halves["held-out"] if p.get("added") == LATEST])
    if len(names) == 2:
        results["all"] = evaluate(pairs)
    text = report(results, len(pairs), date=common.machine_info()["date"][:10])
    if args.similarity:
        text += "\n".join(similarity_report(pairs, similarities(pairs))) + "\n"
    if args.unlabelled:
        text += "\n".join(unlabelled_report()) + "\n"
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
