"""The keyword signals alone (``memories.retrieval.keyword.keyword_signals``), in-process on a kept
home: what they return for each query, written as JSON so that two trees' code can be compared on
the same bucket, and their CPU per search, this process's and the PostgreSQL backend's.

    cd TREE && ENGRAM_HOME=/work/homes/h ./engram bench keyword_cpu.py --queries 200 --out /tmp/a.json
    ./engram bench keyword_cpu.py --compare /tmp/a.json /tmp/b.json

The bucket is the one ``bench/loader.py`` loads (tenant ``bench-corpus``, bucket ``corpus``); the
queries are the first ``--queries`` of ``bench/data/queries-100k.jsonl``. Each query is answered
under a few ranking settings (the default, ``bm25_b_long``, ``keyword_plurals``, and with a filter)
for the comparison; the CPU passes use the default ranking, signals in this thread
(``ENGRAM_SEARCH_PARALLEL`` off: one backend does all the statements). CPU time is what the kernel
counts (process: ``time.process_time``; backend: ``/proc/PID/stat``, 10 ms ticks, so only sums over
many searches mean anything). Run trees alternately in the same window: the machine's load moves
both.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import common

SETTINGS = {
    "default": ({}, {}),
    "b_long": ({"bm25_b_long": 0.8}, {}),
    "plurals": ({"keyword_plurals": True}, {}),
    "filtered": ({}, {"attributed_to": "user"}),
}
NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def _backend_ticks(pid: int) -> int:
    fields = common._proc_stat(pid)
    return 0 if fields is None else common._ticks(fields)


def measure(args) -> dict:
    sys.path.insert(0, str(Path.cwd()))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "engram_site.settings")
    os.environ["ENGRAM_EMBEDDED_PG_KEEP"] = "1"  # join the home's PostgreSQL, never stop it
    import django

    django.setup()
    from django.conf import settings

    from engram_site.replica import read_connection
    from engram_site.scoping import scopes_disabled
    from memories import ranking
    from memories.filters import MemoryFilters
    from memories.retrieval import keyword
    from tenants.models import Bucket

    settings.ENGRAM_SEARCH_PARALLEL = False
    with scopes_disabled():
        bucket = Bucket.objects.select_related("tenant").get(tenant__slug="bench-corpus", name="corpus")
    lines = Path(args.query_file).read_text().splitlines()[: args.queries]
    queries = [json.loads(line)["query"] for line in lines]

    def run(query: str, overrides: dict, filter_fields: dict):
        config = ranking.resolve(bucket.tenant.settings, overrides or None, None)
        filters = MemoryFilters(reference_time=NOW, **filter_fields)
        return keyword.keyword_signals(bucket, query, filters, config, NOW)

    with scopes_disabled():
        answers: dict[str, list] = {}
        for name, (overrides, filter_fields) in SETTINGS.items():
            for query in queries:
                memory_side, context_side, key_side, coverage, masses = run(query, overrides, filter_fields)
                answers[f"{name}|{query}"] = [
                    [[str(i), s] for i, s in memory_side],
                    [[str(i), s] for i, s in context_side],
                    [[str(i), s] for i, s in key_side],
                    coverage,
                    masses,
                ]
        with read_connection().cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            backend = cur.fetchone()[0]
        hz = os.sysconf("SC_CLK_TCK")
        passes = []
        for _ in range(args.repeat):
            ticks, cpu, wall = _backend_ticks(backend), time.process_time(), time.perf_counter()
            for query in queries:
                run(query, {}, {})
            passes.append(
                {
                    "process_cpu_ms": (time.process_time() - cpu) * 1000 / len(queries),
                    "backend_cpu_ms": (_backend_ticks(backend) - ticks) * 1000 / hz / len(queries),
                    "wall_ms": (time.perf_counter() - wall) * 1000 / len(queries),
                }
            )
    return {"tree": str(Path.cwd()), "queries": len(queries), "answers": answers, "passes": passes}


def _tie_groups(ranked: list) -> list[set]:
    """The ids of a ranked list in groups of equal scores (to 1e-12, relative)."""
    groups: list[set] = []
    last = None
    for memory_id, score in ranked:
        if last is None or abs(score - last) > 1e-12 * max(abs(last), 1e-12):
            groups.append(set())
        groups[-1].add(memory_id)
        last = score
    return groups


def compare(a_path: Path, b_path: Path) -> int:
    """Lists of two runs: the same ids in the same order with the same scores, or else whether
    only ties moved (the same scores, each group of tied scores the same ids; the last group may
    be cut at a different id)."""
    a, b = json.loads(a_path.read_text()), json.loads(b_path.read_text())
    exact, ties, differing, worst, extras = 0, [], [], 0.0, []
    for key, left in a["answers"].items():
        right = b["answers"][key]
        for side, (xs, ys) in enumerate(zip(left[:3], right[:3], strict=True)):
            if len(xs) == len(ys):
                for (_, x), (_, y) in zip(xs, ys, strict=True):
                    worst = max(worst, abs(x - y) / max(abs(x), 1e-12))
            if [x[0] for x in xs] == [y[0] for y in ys]:
                exact += 1
                continue
            gx, gy = _tie_groups(xs), _tie_groups(ys)
            if len(xs) == len(ys) and len(gx) == len(gy) and gx[:-1] == gy[:-1]:
                ties.append((key, side))
            else:
                differing.append((key, side))
        if json.dumps(left[3:]) != json.dumps(right[3:]):
            extras.append((key, left[3:], right[3:]))
    lists = exact + len(ties) + len(differing)
    print(
        f"{len(a['answers'])} answers, {lists} lists: {exact} identical (ids and order), {len(ties)} differing "
        f"only in the order of tied scores, {len(differing)} otherwise; largest relative score difference "
        f"{worst:.3g}; coverage or masses differing: {len(extras)}"
    )
    for key, side in differing[:10]:
        print(f"  differs: {key}: list {side}")
    for key, side in ties[:10]:
        print(f"  tie order: {key}: list {side}")
    for key, x, y in extras[:5]:
        print(f"  coverage/masses: {key}: {x} / {y}")
    for name, run in (("a", a), ("b", b)):
        for p in run["passes"]:
            print(f"{name} {run['tree']}: " + ", ".join(f"{k} {v:.2f}" for k, v in p.items()))
    return 1 if differing else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--query-file", default=str(common.BENCH_DIR / "data" / "queries-100k.jsonl"))
    p.add_argument("--repeat", type=int, default=3, help="CPU passes over the queries (default ranking)")
    p.add_argument("--out", type=Path)
    p.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"))
    args = p.parse_args()
    if args.compare:
        return compare(*args.compare)
    result = measure(args)
    for p_ in result["passes"]:
        print(", ".join(f"{k} {v:.2f}" for k, v in p_.items()))
    if args.out:
        args.out.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
