"""Where one hybrid search's CPU goes, function by function: ``memories_search`` (what
``POST /search`` calls) run in-process on a loaded bucket, under cProfile.

    ./engram bench search_profile.py --rows 600 --home /work/homes/profile-600
    ./engram bench search_profile.py --rows 10000 --home /tmp/engram-10k --queries 100 --repeat 2

The bucket is loaded as ``search_latency.py`` loads it (``bench/loader.py``: the first
``--rows`` rows of the corpus, resumable; ``--home`` keeps it for the next run). A child process
configured like the server (``bench/inproc.py``) runs every search with the signals in its own
thread (``ENGRAM_SEARCH_PARALLEL`` off, so that the profiler and the statement counter see all of
the work), first plainly — per search: wall time, CPU time of the process, SQL statements and
their time, the database server's CPU — and then again under cProfile, whose overhead inflates
the Python share; its table gives the functions with the most own time and the share of each
area (Engram's apps, each library, the Python runtime).

CPU seconds are less disturbed than wall time by other work on the machine, but a loaded
machine slows both (caches, frequency); the report says what ran beside it.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import common
import inproc
import loader


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=600, help="memories in the bucket (the first rows of the corpus)")
    loader.add_load_arguments(p)
    common.add_server_args(p)
    p.add_argument("--queries", type=int, default=100, help="distinct queries from the corpus' query pool")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--explain", type=int, default=3, help="searches whose statements are EXPLAIN ANALYZEd")
    p.add_argument("--ranking", type=json.loads, help="ranking overrides of every search (JSON)")
    p.add_argument("--note", default="", help="what else ran on the machine")
    p.add_argument("--series", default="")
    p.add_argument("--out", type=Path)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    pool, _ = loader.query_pool(args.corpus, loader.real_rows(args))
    queries = [q["query"] for q in pool][: args.queries]  # unfiltered searches of the pool's texts
    with common.server_from_args(args, tenant=loader.TENANT) as target:
        load = loader.load(target, args)
        if target.private is not None:
            env, _ = inproc.child_env(private_env=target.private.env())
        else:
            env, _ = inproc.child_env(home=target.home)
        result = inproc.run_task(
            "search-profile", {"bucket_id": load.bucket_id, "queries": queries, "repeat": args.repeat,
                               "top": args.top, "explain": args.explain, "ranking": args.ranking}, env)  # fmt: skip
    plain = result["plain"]
    n = plain["searches"]
    per = {
        "wall ms": plain["wall_s"] * 1000 / n,
        "process CPU ms": plain["cpu_s"] * 1000 / n,
        "SQL statements": plain["statements"] / n,
        "SQL time ms": plain["statement_s"] * 1000 / n,
        "database CPU ms": None if plain["database_cpu_s"] is None else plain["database_cpu_s"] * 1000 / n,
    }
    profiled = result["profiled_total_s"]
    areas = [(area, f"{seconds * 1000 / n:.2f}", f"{100 * seconds / profiled:.0f}%")
             for area, seconds in result["by_area"].items() if seconds / profiled >= 0.005]  # fmt: skip
    top = [(r["function"], r["calls"] // n if r["calls"] >= n else f"{r['calls'] / n:.2f}",
            f"{r['own_s'] * 1000 / n:.3f}", f"{r['cumulative_s'] * 1000 / n:.2f}") for r in result["top"]]  # fmt: skip
    detail = result["detail"]
    totals = detail["totals"]
    searches = totals["searches"]
    statement_rows = [
        (label, f"{v['count'] / searches:.2f}", f"{v['wall_s'] * 1000 / searches:.2f}",
         f"{v['db_cpu_s'] * 1000 / searches:.2f}")
        for label, v in sorted(detail["statements"].items(), key=lambda kv: -kv[1]["wall_s"])
    ]  # fmt: skip
    all_wall = sum(v["wall_s"] for v in detail["statements"].values()) * 1000 / searches
    all_cpu = sum(v["db_cpu_s"] for v in detail["statements"].values()) * 1000 / searches
    statement_rows.append(("**all**", f"{sum(v['count'] for v in detail['statements'].values()) / searches:.2f}",
                           f"{all_wall:.2f}", f"{all_cpu:.2f}"))  # fmt: skip
    embed_cpu = totals["embed_cpu_s"] * 1000 / searches
    serialise_cpu = totals["serialise_cpu_s"] * 1000 / searches
    database_cpu = "—" if per["database CPU ms"] is None else f"{per['database CPU ms']:.2f}"
    split = [
        ("wall (plain pass)", f"{per['wall ms']:.2f}"),
        ("process CPU (plain pass)", f"{per['process CPU ms']:.2f}"),
        ("- of which the query embedding (CPU of the thread; detail pass)", f"{embed_cpu:.2f}"),
        ("- of which serialising the answer (hits as the view renders them, JSON; detail pass)",
         f"{serialise_cpu:.3f}"),
        ("- of which Python around the statements and the ranking (the rest)",
         f"{per['process CPU ms'] - embed_cpu - serialise_cpu:.2f}"),
        ("query embedding, wall (detail pass)", f"{totals['embed_wall_s'] * 1000 / searches:.2f}"),
        ("waiting on SQL statements (plain pass)", f"{per['SQL time ms']:.2f}"),
        ("database CPU (whole server, plain pass)", database_cpu),
        ("database backend CPU (sum over statements, detail pass)", f"{all_cpu:.2f}"),
    ]  # fmt: skip
    plan_rows = []
    for label, found in detail["plans"].items():
        plan_rows.append((label, len(found), f"{statistics.median(f['planning_ms'] or 0 for f in found):.2f}",
                          f"{statistics.median(f['execution_ms'] or 0 for f in found):.2f}",
                          f"{statistics.median(f['buffers'] for f in found):.0f}", found[0]["plan"][:160]))  # fmt: skip
    size = common.size_label(args.rows)
    headline = (
        f"{size} memories, one hybrid search in-process (signals in one thread): wall {per['wall ms']:.1f} ms, "
        f"process CPU {per['process CPU ms']:.1f} ms, {per['SQL statements']:.1f} SQL statements taking "
        f"{per['SQL time ms']:.1f} ms"
        + (f", database CPU {per['database CPU ms']:.1f} ms" if per["database CPU ms"] is not None else "")
        + f"; largest own-time area under the profiler: {next(iter(result['by_area']))}"
    )
    text = "\n".join(
        [
            f"# Where a hybrid search's CPU goes, {size} memories",
            "",
            common.machine_markdown(),
            f"- load on the machine: {args.note or '(not stated)'}",
            f"- bucket: {load.describe()}",
            f"- {n} searches ({len(queries)} distinct queries x "
            f"{args.repeat}), default ranking, `record_access` off, signals in the calling thread",
            "",
            "## Per search, without the profiler",
            "",
            common.markdown_table(
                ("measure", "per search"), [(k, "—" if v is None else f"{v:.2f}") for k, v in per.items()]
            ),  # fmt: skip
            "",
            "Process CPU includes the query's embedding (the model runs in this process) and the Python around "
            "each statement; SQL time is the wall time the process waited on its statements (the database "
            "server's work and the round trips).",
            "",
            "## Own time by area, under cProfile (inflated by the profiler)",
            "",
            common.markdown_table(("area", "ms per search", "share"), areas),
            "",
            "## Each statement, by the function that ran it (a third pass, without the profiler)",
            "",
            common.markdown_table(
                ("statement", "per search", "wall ms per search", "database CPU ms per search"), statement_rows
            ),  # fmt: skip
            "",
            "The database CPU is the backend's user+system time from /proc, read before and after each statement: "
            "the kernel counts it in 10 ms ticks, so a single statement's figure is coarse, the sums over all "
            "searches are not.",
            "",
            "## CPU and waiting, per search",
            "",
            common.markdown_table(("what", "ms per search"), split),
            "",
            f"## EXPLAIN (ANALYZE, BUFFERS) of each statement of {args.explain} searches (medians)",
            "",
            common.markdown_table(("statement", "runs", "planning ms", "execution ms", "buffers", "plan"), plan_rows),
            "",
            f"## The {args.top} functions with the most own time",
            "",
            common.markdown_table(
                ("function", "calls per search", "own ms per search", "cumulative ms per search"), top
            ),
            "",
        ]
    )
    header = common.report_header("search_profile.py", headline, series=args.series or size)
    common.publish_report(text, out=args.out, name=f"search-profile-{size}",
                          no_write=args.no_write, header=header)  # fmt: skip


if __name__ == "__main__":
    main()
