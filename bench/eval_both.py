"""Ranking settings scored on both evaluation sets at once: the way Engram's defaults are chosen.

One server holds both sets: our conversational set (``bench/eval/conversations.json``, each
conversation in its own bucket with ``--distractors-per-bucket`` generated memories about other
people, written as in ``eval_retrieval.py``) and a LoCoMo-format file (written and asked under the
public protocol of ``eval_locomo.py``). Every ``--variant`` (a search ``ranking`` object) is run
in every ``--modes`` on both, and the report puts the two sets side by side.

The rule that picks a default must not favour either set: for each set, a variant's *regret* is
how far its recall@10 falls below the best variant's on that set; the variant with the smallest
worst regret wins (ties: the higher mean recall@10). The report marks it.

    python bench/eval_both.py --locomo ~/data/locomo10.json --build-graph \\
        --variant default='{}' --variant kw1='{"weights": {"keyword": 1}}'
    # keep the server's data and reuse the written buckets in a later run (search-side changes only)
    python bench/eval_both.py --locomo PATH --home /tmp/both --reuse --variant ...
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import common
import eval_locomo as lm
import eval_retrieval as er

MAPPING = "eval-both-buckets.json"


def ingest_both(client, ours, locomo, distractors) -> tuple[dict, dict]:
    ours_in: dict[str, er.IngestedConversation] = {}
    for i, conv in enumerate(ours.conversations):
        ours_in[conv["id"]] = er.ingest_conversation(
            client, conv, f"both-ours-{conv['id']}", distractors[i] if distractors else ()
        )
        common.log(f"ingested ours {conv['id']}")
    locomo_in = lm.ingest(client, locomo, "both-locomo")
    return ours_in, locomo_in


def _save(path: Path, ours_in: dict, locomo_in: dict) -> None:
    def dump(d):
        return {k: {"bucket_id": v.bucket_id, "memory_turns": v.memory_turns} for k, v in d.items()}

    path.write_text(json.dumps({"ours": dump(ours_in), "locomo": dump(locomo_in)}), encoding="utf-8")


def _load(path: Path) -> tuple[dict, dict]:
    raw = json.loads(path.read_text(encoding="utf-8"))

    def load(d):
        return {k: er.IngestedConversation(k, v["bucket_id"], {}, v["memory_turns"], 0, 0.0) for k, v in d.items()}

    return load(raw["ours"]), load(raw["locomo"])


def headline(ours_records: list[dict], locomo_records: list[dict], variants, modes, chosen: str | None) -> str:
    """Recall@10 of the first variant in each mode on both sets, and the variant the rule picks."""
    first = variants[0].name

    def r10(records, mode):
        return er.aggregate([r for r in records if r["variant"] == first and r["mode"] == mode])["r@10"]

    parts = [f"{mode} {r10(ours_records, mode):.3f} / {r10(locomo_records, mode):.3f}" for mode in modes]
    text = f"recall@10 of {first}, ours / LoCoMo: " + ", ".join(parts)
    return text + (f"; chosen: {chosen}" if chosen and len(variants) > 1 else "")


def table(ours_records: list[dict], locomo_records: list[dict], variants, modes) -> tuple[str, str | None]:
    """The side-by-side table, and the name of the variant the rule picks (hybrid rows)."""

    def agg(records, name, mode, kind=None):
        recs = [
            r for r in records if r["variant"] == name and r["mode"] == mode and (kind is None or r["type"] == kind)
        ]
        return er.aggregate(recs)

    rows, hybrid = [], {}
    for i, v in enumerate(variants):
        for mode in modes if i == 0 else ["hybrid"]:
            o, lo = agg(ours_records, v.name, mode), agg(locomo_records, v.name, mode)
            cats = [agg(locomo_records, v.name, mode, t)["r@10"] for t in lm.CATEGORIES.values()]
            lat = [
                r["latency_ms"] for r in ours_records + locomo_records if r["variant"] == v.name and r["mode"] == mode
            ]
            rows.append(
                [v.name, mode, o["r@10"], o["all@10"], o["mrr"], lo["r@10"], lo["all@10"], lo["mrr"], *cats,
                 common.percentile(lat, 50), common.percentile(lat, 95)]
            )  # fmt: skip
            if mode == "hybrid":
                hybrid[v.name] = (o["r@10"], lo["r@10"])
    chosen = None
    if hybrid:
        best_o = max(x[0] for x in hybrid.values())
        best_l = max(x[1] for x in hybrid.values())
        chosen = min(hybrid, key=lambda n: (max(best_o - hybrid[n][0], best_l - hybrid[n][1]), -sum(hybrid[n])))
        for row in rows:
            if row[1] == "hybrid":
                o_r, l_r = hybrid[row[0]]
                row.append(f"{max(best_o - o_r, best_l - l_r):.3f}" + (" **chosen**" if row[0] == chosen else ""))
            else:
                row.append("")
    headers = [
        "variant", "mode", "ours r@10", "ours all@10", "ours MRR", "LoCoMo r@10", "LoCoMo all@10", "LoCoMo MRR",
        *(f"LoCoMo {t}" for t in lm.CATEGORIES.values()), "p50 ms", "p95 ms", "worst regret",
    ]  # fmt: skip
    text = common.markdown_table(headers, rows, "ll" + "r" * (len(headers) - 2))
    return text, chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--locomo", type=Path, required=True, help="a LoCoMo-format JSON file")
    parser.add_argument("--dataset", type=Path, default=er.DEFAULT_DATASET, help="our conversational set")
    parser.add_argument("--distractors", type=Path, default=common.BENCH_DIR / "data" / "corpus-100k.jsonl")
    parser.add_argument("--distractors-per-bucket", type=int, default=500)
    parser.add_argument("--build-graph", action="store_true", help="build the graph after writing (private server)")
    parser.add_argument("--reuse", action="store_true", help=f"reuse the buckets recorded in $HOME/{MAPPING}")
    parser.add_argument("--out", type=Path, help="report path (default bench/results/eval-both-<date>.md)")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--json-out", type=Path, help="every per-question record of both sets")
    lm.add_arguments(parser)
    common.add_server_args(parser)
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    variants = er.parse_variants(args.ranking, args.variant)
    ours = er.load_dataset(args.dataset)
    locomo = lm.load_locomo(args.locomo)
    if not args.distractors.exists():
        raise SystemExit(
            f"{args.distractors} is missing: "
            f"python bench/make_corpus.py --rows 100000 --seed 1 --out {args.distractors}"
        )
    distractors = er.load_distractors(args.distractors, args.distractors_per_bucket, len(ours.conversations))
    machine, command = common.machine_info(), common.command_line()
    with common.server_from_args(args, tenant="eval-both" if args.reuse else None) as target:
        mapping = target.home / MAPPING if target.home else None
        with target.client() as client:
            if args.reuse and mapping and mapping.exists():
                ours_in, locomo_in = _load(mapping)
                common.log(f"reusing the buckets in {mapping}")
            else:
                ours_in, locomo_in = ingest_both(client, ours, locomo, distractors)
                if args.build_graph:
                    er._build_graph(target)
                if mapping:
                    _save(mapping, ours_in, locomo_in)
            ours_records, locomo_records = [], []
            # Every mode for the first variant (the baseline), hybrid for the others.
            for i, variant in enumerate(variants):
                for mode in modes if i == 0 else ["hybrid"]:
                    common.log(f"searching both sets: {variant.name}, {mode}")
                    ours_records += er.run_searches(client, ours, ours_in, [variant], [mode], 20, progress=False)
                    locomo_records += lm.run_searches(client, locomo, locomo_in, [variant], [mode], progress=False)
        description = target.describe()
    text, chosen = table(ours_records, locomo_records, variants, modes)
    lines = [
        f"# Ranking on both evaluation sets ({machine['date'][:10]})",
        "",
        common.machine_markdown(machine),
        f"- server: {description}",
        f"- command: `{command}`",
        f"- ours: {len(ours.questions)} questions, {args.distractors_per_bucket} distractors per bucket; "
        f"LoCoMo-format file `{args.locomo.name}`: {len(locomo.conversations)} conversations, "
        f"{len(locomo.questions)} questions",
        f"- graph {'built' if args.build_graph else 'not built (graph signal empty)'}",
        "- worst regret: per set, how far the variant's hybrid recall@10 is below the best variant's on that "
        "set; the largest of the two. The smallest worst regret is chosen (ties: higher mean).",
        "",
        text,
        "",
        *(
            f"- `{v.name}`: `{json.dumps(v.ranking, sort_keys=True) if v.ranking else 'server defaults'}`"
            for v in variants
        ),
        "",
    ]
    report = "\n".join(lines)
    header = common.report_header(__file__, headline(ours_records, locomo_records, variants, modes, chosen),
                                  info=machine, command=command)  # fmt: skip
    common.publish_report(report, out=args.out, name="eval-both", no_write=args.no_write, header=header)
    if args.json_out:
        args.json_out.write_text(json.dumps({"ours": ours_records, "locomo": locomo_records}), encoding="utf-8")
    if chosen:
        common.log(f"chosen by the worst-regret rule: {chosen}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
