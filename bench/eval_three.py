"""Ranking settings scored on the three evaluation sets at once: the way Engram's defaults are chosen.

One server holds all three sets, each conversation in its own bucket:

- **ours** (``bench/eval/conversations.json``): each bucket with ``--distractors-per-bucket``
  generated memories about other people, written and asked as in ``eval_retrieval.py``;
- **LoCoMo** (a LoCoMo-format file, ``--locomo``): written and asked under the public protocol of
  ``eval_locomo.py``;
- **long** (``bench/eval/long/sessions.json``): long user–assistant working sessions, written and
  asked as in ``eval_long.py``.

Every ``--variant`` (a search ``ranking`` object) is run in hybrid on every set, and the first
variant also in every other ``--modes``; the report puts the sets side by side, then gives
recall@5/10/20, all@10 and MRR per category of each set for the hybrid rows.

The rule that picks a default must favour no set: for each set, a variant's *regret* is how far
its hybrid recall@10 falls below the best variant's on that set; the variant with the smallest
worst regret over the sets run wins (ties: the higher mean recall@10). The report marks it.

    python bench/eval_three.py --locomo ~/data/locomo10.json --build-graph \\
        --variant default='{}' --variant kw1='{"weights": {"keyword": 1}}'
    # keep the server's data and reuse the written buckets in a later run (search-side changes only)
    python bench/eval_three.py --locomo PATH --home /tmp/three --reuse --variant ...
    # fewer sets while exploring (the rule then looks at those only)
    python bench/eval_three.py --sets ours,long --variant ...
    # key documents built after the graph, their two signals weighted in
    python bench/eval_three.py --locomo PATH --build-graph --build-keys \\
        --variant default='{}' --variant keys='{"weights": {"keyword_key": 0.5, "vector_key": 0.5}}'
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import common
import eval_locomo as lm
import eval_long as el
import eval_retrieval as er

MAPPING = "eval-three-buckets.json"
SETS = ("ours", "locomo", "long")
TITLES = {"ours": "ours", "locomo": "LoCoMo", "long": "long"}


@dataclass
class EvalSet:
    """One evaluation set: how to write it, how to ask it, how its records name a category."""

    key: str
    data: Any
    categories: tuple[str, ...]
    category_of: Callable[[dict], str]
    ingest: Callable[[Any], dict]
    search: Callable[[Any, dict, list, list], list[dict]]
    describe: str


def load_sets(args: argparse.Namespace, names: list[str]) -> list[EvalSet]:
    sets: list[EvalSet] = []
    if "ours" in names:
        ours = er.load_dataset(args.dataset)
        if not args.distractors.exists():
            raise SystemExit(
                f"{args.distractors} is missing: "
                f"python bench/make_corpus.py --rows 100000 --seed 1 --out {args.distractors}"
            )
        distractors = er.load_distractors(args.distractors, args.distractors_per_bucket, len(ours.conversations))

        def ingest_ours(client, ours=ours, distractors=distractors):
            written = {}
            for i, conv in enumerate(ours.conversations):
                written[conv["id"]] = er.ingest_conversation(
                    client, conv, f"three-ours-{conv['id']}", distractors[i] if distractors else ()
                )
            common.log(f"ingested ours: {len(written)} conversations")
            return written

        sets.append(EvalSet(
            "ours", ours, tuple(sorted({q["type"] for q in ours.questions})), lambda r: r["type"], ingest_ours,
            lambda client, written, variants, modes, ours=ours: er.run_searches(
                client, ours, written, variants, modes, 20, progress=False),
            f"ours: {len(ours.questions)} questions, {args.distractors_per_bucket} distractors per bucket",
        ))  # fmt: skip
    if "locomo" in names:
        if args.locomo is None:
            raise SystemExit("the locomo set needs --locomo PATH (a LoCoMo-format file), or leave it out of --sets")
        locomo = lm.load_locomo(args.locomo)
        sets.append(EvalSet(
            "locomo", locomo, tuple(lm.CATEGORIES.values()), lambda r: r["type"],
            lambda client, locomo=locomo: lm.ingest(client, locomo, "three-locomo"),
            lambda client, written, variants, modes, locomo=locomo: lm.run_searches(
                client, locomo, written, variants, modes, progress=False),
            f"LoCoMo-format file `{args.locomo.name}`: {len(locomo.conversations)} conversations, "
            f"{len(locomo.questions)} questions",
        ))  # fmt: skip
    if "long" in names:
        long = el.load_set(args.long)
        sets.append(EvalSet(
            "long", long, el.CATEGORIES, lambda r: r["category"],
            lambda client, long=long: el.ingest(client, long, "three-long", progress=False),
            lambda client, written, variants, modes, long=long: el.run_searches(
                client, long, written, variants, modes, progress=False),
            f"long: {len(long.conversations)} conversations, {len(long.questions)} questions",
        ))  # fmt: skip
    return sets


def _save(path: Path, written: dict[str, dict]) -> None:
    path.write_text(
        json.dumps(
            {
                key: {k: {"bucket_id": v.bucket_id, "memory_turns": v.memory_turns} for k, v in per_set.items()}
                for key, per_set in written.items()
            }
        ),
        encoding="utf-8",
    )


def _load(path: Path) -> dict[str, dict]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    return {
        key: {k: er.IngestedConversation(k, v["bucket_id"], {}, v["memory_turns"], 0, 0.0) for k, v in per_set.items()}
        for key, per_set in raw.items()
    }


def _build_keys(target: Any) -> None:
    """The key documents of every memory whose key is missing or out of date, in the server's home
    (its private server runs no worker to build them as they are written)."""
    if target.private is None:
        raise SystemExit("--build-keys needs a private server (it runs manage.py in the server's ENGRAM_HOME)")
    started = time.perf_counter()
    common.log("building key documents (build_keys --no-wait)")
    common.manage("build_keys", "--no-wait", "--no-progress", env=target.private.env(), timeout=7200)
    common.log(f"keys built in {time.perf_counter() - started:.1f}s")


def _select(records: list[dict], variant: str, mode: str) -> list[dict]:
    return [r for r in records if r["variant"] == variant and r["mode"] == mode]


def choose(hybrid: dict[str, dict[str, float]]) -> tuple[str | None, dict[str, float]]:
    """The variant with the smallest worst regret over the sets (ties: the higher mean), and each
    variant's worst regret. ``hybrid``: variant -> set -> recall@10."""
    if not hybrid:
        return None, {}
    keys = next(iter(hybrid.values())).keys()
    best = {k: max(per[k] for per in hybrid.values()) for k in keys}
    regret = {name: max(best[k] - per[k] for k in keys) for name, per in hybrid.items()}
    chosen = min(hybrid, key=lambda n: (regret[n], -sum(hybrid[n].values())))
    return chosen, regret


def table(records: dict[str, list[dict]], sets: list[EvalSet], variants, modes) -> tuple[str, str | None]:
    """The side-by-side table and the variant the rule picks (hybrid rows)."""
    rows, hybrid = [], {}
    for i, v in enumerate(variants):
        for mode in modes if i == 0 else ["hybrid"]:
            row: list[Any] = [v.name, mode]
            latencies: list[float] = []
            for s in sets:
                recs = _select(records[s.key], v.name, mode)
                agg = er.aggregate(recs)
                row += [er._fmt(agg["r@10"]), er._fmt(agg["mrr"])]
                if s.key == "locomo":
                    row += [er._fmt(er.aggregate(r for r in recs if r["type"] == t)["r@10"]) for t in s.categories]
                latencies += [r["latency_ms"] for r in recs]
                if mode == "hybrid":
                    hybrid.setdefault(v.name, {})[s.key] = agg["r@10"]
            row += [f"{common.percentile(latencies, 50):.1f}", f"{common.percentile(latencies, 95):.1f}"]
            rows.append(row)
    chosen, regret = choose(hybrid)
    for row in rows:
        name, mode = row[0], row[1]
        mark = " **chosen**" if name == chosen and len(variants) > 1 else ""
        row.append(f"{regret[name]:.3f}{mark}" if mode == "hybrid" else "")
    headers = ["variant", "mode"]
    for s in sets:
        headers += [f"{TITLES[s.key]} r@10", f"{TITLES[s.key]} MRR"]
        if s.key == "locomo":
            headers += [f"LoCoMo {t}" for t in s.categories]
    headers += ["p50 ms", "p95 ms", "worst regret"]
    return common.markdown_table(headers, rows, "ll" + "r" * (len(headers) - 2)), chosen


def category_tables(records: dict[str, list[dict]], sets: list[EvalSet], variants) -> list[str]:
    """Per set, the hybrid rows of every variant: recall@5/10/20, all@10 and MRR by category."""
    lines: list[str] = []
    for s in sets:
        lines += [f"### {TITLES[s.key]}, hybrid, by category", ""]
        rows = []
        for v in variants:
            recs = _select(records[s.key], v.name, "hybrid")
            for category in (*s.categories, "all"):
                part = recs if category == "all" else [r for r in recs if s.category_of(r) == category]
                agg = er.aggregate(part)
                rows.append([v.name, category, agg["n"], *(er._fmt(agg[m]) for m in er.METRICS)])
        lines += [common.markdown_table(["variant", "category", "n", *er.METRICS], rows, "llr" + "r" * len(er.METRICS))]
        lines.append("")
    return lines


def headline(records: dict[str, list[dict]], sets: list[EvalSet], variants, chosen: str | None) -> str:
    first = variants[0].name
    parts = [f"{TITLES[s.key]} {er.aggregate(_select(records[s.key], first, 'hybrid'))['r@10']:.3f}" for s in sets]
    text = f"hybrid recall@10 of {first}: " + ", ".join(parts)
    return text + (f"; chosen: {chosen}" if chosen and len(variants) > 1 else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default=",".join(SETS), help=f"comma-separated, from {','.join(SETS)}")
    parser.add_argument("--locomo", type=Path, help="a LoCoMo-format JSON file (needed for the locomo set)")
    parser.add_argument("--dataset", type=Path, default=er.DEFAULT_DATASET, help="our conversational set")
    parser.add_argument("--distractors", type=Path, default=common.BENCH_DIR / "data" / "corpus-100k.jsonl")
    parser.add_argument("--distractors-per-bucket", type=int, default=500)
    parser.add_argument("--long", type=Path, default=el.DEFAULT_DATASET, help="the long working-session set")
    parser.add_argument("--build-graph", action="store_true", help="build the graph after writing (private server)")
    parser.add_argument(
        "--build-keys",
        action="store_true",
        help="build the memories' key documents (manage.py build_keys --no-wait; private server), after the graph: "
        "keys carry its entities and relations. Runs on --reuse too: it builds only the keys missing or out of date",
    )
    parser.add_argument("--reuse", action="store_true", help=f"reuse the buckets recorded in $HOME/{MAPPING}")
    parser.add_argument("--out", type=Path, help="report path (default bench/results/eval-three-<date>.md)")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--json-out", type=Path, help="every per-question record of every set")
    parser.add_argument("--modes", default="hybrid,keyword,vector", help="comma-separated; hybrid first")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=JSON", help="ranking overrides")
    parser.add_argument("--ranking", help="JSON object of ranking overrides every variant extends")
    common.add_server_args(parser)
    args = parser.parse_args(argv)
    names = [s.strip() for s in args.sets.split(",") if s.strip()]
    if not names or set(names) - set(SETS):
        parser.error(f"--sets takes names from {','.join(SETS)}")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if "hybrid" not in modes or set(modes) - set(er.ALL_MODES):
        parser.error(f"--modes must include hybrid; modes are {er.ALL_MODES}")
    modes = ["hybrid", *(m for m in modes if m != "hybrid")]
    variants = er.parse_variants(args.ranking, args.variant)
    sets = load_sets(args, names)
    machine, command = common.machine_info(), common.command_line()
    records: dict[str, list[dict]] = {s.key: [] for s in sets}
    # With a kept home (--home), one named tenant, so that a later --reuse finds its buckets.
    with common.server_from_args(args, tenant="eval-three" if args.reuse or args.home else None) as target:
        mapping = target.home / MAPPING if target.home else None
        with target.client() as client:
            saved = _load(mapping) if args.reuse and mapping and mapping.exists() else {}
            written = {}
            for s in sets:
                if s.key in saved:
                    written[s.key] = saved[s.key]
                    common.log(f"reusing the {s.key} buckets in {mapping}")
                else:
                    written[s.key] = s.ingest(client)
                    if mapping:  # saved as each set is written: a later step that fails loses no ingest
                        _save(mapping, {**saved, **written})
            if args.build_graph and set(written) - set(saved):
                er._build_graph(target)
            if args.build_keys:
                _build_keys(target)
            for i, variant in enumerate(variants):
                for mode in modes if i == 0 else ["hybrid"]:
                    for s in sets:
                        common.log(f"searching {s.key}: {variant.name}, {mode}")
                        records[s.key] += s.search(client, written[s.key], [variant], [mode])
        description = target.describe()
    text, chosen = table(records, sets, variants, modes)
    lines = [
        f"# Ranking on the three evaluation sets ({machine['date'][:10]})",
        "",
        common.machine_markdown(machine),
        f"- server: {description}",
        f"- command: `{command}`",
        *(f"- {s.describe}" for s in sets),
        f"- graph {'built' if args.build_graph else 'not built (graph signal empty)'}",
        f"- key documents {'built after the graph (build_keys)' if args.build_keys else 'not built by this run'}",
        "- recall@k: share of a question's evidence in the top k; all@10: every evidence item in the top 10; "
        "MRR: first evidence item within the top 20",
        "- worst regret: per set, how far the variant's hybrid recall@10 is below the best variant's on that "
        "set; the largest over the sets. The smallest worst regret is chosen (ties: higher mean).",
        "- latency: every search of the row, all sets, through HTTP with the client's time",
        "",
        text,
        "",
        *(
            f"- `{v.name}`: `{json.dumps(v.ranking, sort_keys=True) if v.ranking else 'server defaults'}`"
            for v in variants
        ),
        "",
        "## By category",
        "",
        *category_tables(records, sets, variants),
    ]
    header = common.report_header(__file__, headline(records, sets, variants, chosen), info=machine, command=command)
    common.publish_report("\n".join(lines), out=args.out, name="eval-three", no_write=args.no_write, header=header)
    if args.json_out:
        args.json_out.write_text(json.dumps(records), encoding="utf-8")
    if chosen:
        common.log(f"chosen by the worst-regret rule: {chosen}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
