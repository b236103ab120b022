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
    p.add_argument("--note", default="", help="what else ran on the machine")
    p.add_argument("--series", default="")
    p.add_argument("--out", type=Path)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    pool, _ = loader.query_pool(args.corpus, args.rows)
    queries = [q["query"] for q in pool][: args.queries]  # unfiltered searches of the pool's texts
    with common.server_from_args(args, tenant=loader.TENANT) as target:
        load = loader.load(target, args)
        if target.private is not None:
            env, _ = inproc.child_env(private_env=target.private.env())
        else:
            env, _ = inproc.child_env(home=target.home)
        result = inproc.run_task(
            "search-profile", {"bucket_id": load.bucket_id, "queries": queries, "repeat": args.repeat,
                               "top": args.top}, env)  # fmt: skip
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
            f"- bucket: the first {args.rows:,} rows of the corpus; {n} searches ({len(queries)} distinct queries x "
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
