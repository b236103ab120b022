"""Process CPU per hybrid search of source trees side by side, on one loaded bucket, and whether
they answer the same: for a change that should make a search cheaper and nothing else.

    ./engram bench search_compare.py --rows 100000 --api-rows 8000 --home DIR \\
        --compare before=/tmp/engram-before --queries 150 --repeat 3

Each tree (``--compare LABEL=DIR``, e.g. a ``git worktree`` of the commit before, and this one)
runs in a child process of its own that imports Engram from that tree, joins the server's
PostgreSQL (the bucket is loaded as ``search_latency.py`` loads it, ``bench/loader.py``) and
calls ``memories_search`` (what ``POST /search`` calls) with the signals in its own thread:

1. every query once with ``explain``, rendered as the search view renders its hits
   (``_hit_json``, JSON): the answers compared between trees (ids, scores, the whole explain);
   this pass also fills the query-embedding cache, so that
2. ``--passes`` timed passes over the queries (no explain, ``record_access`` off, the answer
   rendered) measure the CPU of the Python around the statements, the ranking and the
   serialisation without the model's (the embedding is the same code in every tree).

The trees take turns, ``--repeat`` times (A B A B ...), so a busier minute of a shared machine
falls on both; the figures are medians over the turns of each tree's CPU per search.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import common
import loader

BENCH_DIR, REPO_ROOT = common.BENCH_DIR, common.REPO_ROOT


def log(msg: str) -> None:
    print(f"[search_compare] {msg}", file=sys.stderr, flush=True)


def child(request: dict) -> dict:
    """In the child: the answers of every query, then the timed passes."""
    sys.path.insert(0, request["tree"])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "engram_site.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection
    from rest_framework.renderers import JSONRenderer

    from engram_site.providers import embedding, lemmatizer
    from engram_site.scoping import scopes_disabled, tenant_scope
    from memories.apis import search as search_api
    from memories.apis.search import _hit_json
    from memories.retrieval.search import memories_search
    from tenants.models import Bucket

    settings.ENGRAM_SEARCH_PARALLEL = False  # the signals in this thread: process CPU is theirs
    embedding.embed_texts(["warm up the embedding model"])
    lemmatizer.lemmatize_many(["warm up the lemmatizer"])
    with scopes_disabled():
        bucket = Bucket.objects.select_related("tenant").get(pk=request["bucket_id"])
    renderer = JSONRenderer()
    queries = request["queries"]
    now = datetime.fromisoformat(request["now"])  # one moment for every tree: recency is the same

    def render(result, explain: bool) -> bytes:
        # As the view renders them (since it reads the time zone once per answer: _dates_out).
        dates = {"dates": search_api._dates_out()} if hasattr(search_api, "_dates_out") else {}
        body = {"mode_used": result.mode_used, "results": [_hit_json(h, explain, **dates) for h in result.hits],
                "warnings": result.warnings}  # fmt: skip
        return renderer.render(body)

    answers = []
    with tenant_scope(bucket.tenant_id):
        for query in queries:
            result = memories_search(bucket=bucket, query=query, explain=True, record_access=False, now=now)
            answers.append(json.loads(render(result, True)))
        with connection.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            backend = cur.fetchone()[0]
        passes = []
        for _ in range(request["passes"]):
            backend_before = common.process_cpu_seconds(backend)
            cpu_before, started = time.process_time(), time.perf_counter()
            for query in queries:
                render(memories_search(bucket=bucket, query=query, record_access=False, now=now), False)
            cpu, wall = time.process_time() - cpu_before, time.perf_counter() - started
            backend_after = common.process_cpu_seconds(backend)
            passes.append({"cpu_s": cpu, "wall_s": wall, "searches": len(queries),
                           "backend_cpu_s": None if backend_before is None or backend_after is None
                           else backend_after - backend_before})  # fmt: skip
        if request.get("profile"):
            import cProfile

            profiler = cProfile.Profile(time.process_time)  # CPU time: waits on the database count nothing
            profiler.enable()
            for query in queries:
                render(memories_search(bucket=bucket, query=query, record_access=False, now=now), False)
            profiler.disable()
            profiler.dump_stats(request["profile"])
    return {"answers": answers, "passes": passes, "load": os.getloadavg()[0]}


def run_child(tree: Path, request: dict, env: dict[str, str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="engram-compare-") as tmp:
        req, res = Path(tmp) / "request.json", Path(tmp) / "result.json"
        req.write_text(json.dumps({**request, "tree": str(tree)}))
        command = [sys.executable, str(Path(__file__).resolve()), "--child", str(req), str(res)]
        subprocess.run(command, env={**env, "PYTHONPATH": str(tree)}, cwd=str(tree), check=True)
        return json.loads(res.read_text())


def differences(a: list[dict], b: list[dict]) -> dict[str, int]:
    """Queries whose answers differ: in the hits' ids and order, in a score, in anything else."""
    counts = {"ids": 0, "scores": 0, "other": 0}
    for one, other in zip(a, b, strict=True):
        if [h["id"] for h in one["results"]] != [h["id"] for h in other["results"]]:
            counts["ids"] += 1
        elif [h["score"] for h in one["results"]] != [h["score"] for h in other["results"]]:
            counts["scores"] += 1
        elif one != other:
            counts["other"] += 1
    return counts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("paths", nargs="*", help=argparse.SUPPRESS)
    p.add_argument("--rows", type=int, default=10000, help="memories in the bucket (the first rows of the corpus)")
    loader.add_load_arguments(p)
    common.add_server_args(p)
    p.add_argument("--compare", action="append", default=[], metavar="LABEL=DIR",
                   help="a source tree measured in turn with this one (the first: the answers' reference)")  # fmt: skip
    p.add_argument("--queries", type=int, default=150, help="distinct queries of bench/data/queries-100k.jsonl")
    p.add_argument("--query-file", type=Path, default=BENCH_DIR / "data" / "queries-100k.jsonl")
    p.add_argument("--passes", type=int, default=2, help="timed passes over the queries in each turn")
    p.add_argument("--repeat", type=int, default=3, help="turns of each tree")
    p.add_argument(
        "--profile",
        type=Path,
        help="after the last turn of this tree, one pass under cProfile (CPU time) "
        "whose statistics go to this file (pstats)",
    )
    p.add_argument("--note", default="", help="what else ran on the machine")
    p.add_argument("--series", default="")
    p.add_argument("--out", type=Path)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    if args.child:
        request_path, result_path = args.paths
        Path(result_path).write_text(json.dumps(child(json.loads(Path(request_path).read_text()))))
        return

    with open(args.query_file, encoding="utf-8") as fh:
        queries = [json.loads(line)["query"] for line in fh][: args.queries]
    trees = [tuple(item.split("=", 1)) for item in args.compare] + [("this", str(REPO_ROOT))]
    labels = [label for label, _ in trees]
    turns: dict[str, list[dict]] = {label: [] for label in labels}
    with common.server_from_args(args, tenant=loader.TENANT) as target:
        load = loader.load(target, args)
        base = target.private.env() if target.private is not None else {**os.environ, "ENGRAM_HOME": str(target.home)}
        env = {**base, "DJANGO_SETTINGS_MODULE": "engram_site.settings", "ENGRAM_EMBEDDED_PG_KEEP": "1",
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip
        request = {"bucket_id": load.bucket_id, "queries": queries, "passes": args.passes,
                   "now": datetime.now(UTC).isoformat()}  # fmt: skip
        for turn in range(args.repeat):
            for label, tree in trees:
                profile = args.profile and label == "this" and turn == args.repeat - 1
                result = run_child(Path(tree), {**request, "profile": str(args.profile) if profile else None}, env)
                turns[label].append(result)
                cpu = statistics.median(p["cpu_s"] / p["searches"] for p in result["passes"]) * 1000
                log(f"turn {turn + 1} {label}: {cpu:.2f} ms process CPU per search (load {result['load']:.1f})")

    def per_search(label: str, key: str) -> float | None:
        values = [p[key] / p["searches"] * 1000 for r in turns[label] for p in r["passes"] if p[key] is not None]
        return statistics.median(values) if values else None

    reference = turns[labels[0]][0]["answers"]
    rows, diff_rows = [], []
    for label in labels:
        cpu, backend, wall = per_search(label, "cpu_s"), per_search(label, "backend_cpu_s"), per_search(label, "wall_s")
        each = [p["cpu_s"] / p["searches"] * 1000 for r in turns[label] for p in r["passes"]]
        rows.append((label, f"{cpu:.2f}", f"{min(each):.2f}–{max(each):.2f}",
                     "—" if backend is None else f"{backend:.2f}", f"{wall:.1f}",
                     ", ".join(f"{r['load']:.1f}" for r in turns[label])))  # fmt: skip
        for i, r in enumerate(turns[label]):
            if label == labels[0] and i == 0:
                continue
            d = differences(reference, r["answers"])
            diff_rows.append((f"{label} turn {i + 1}", d["ids"], d["scores"], d["other"]))
    first, last = per_search(labels[0], "cpu_s"), per_search(labels[-1], "cpu_s")
    size = common.size_label(args.rows)
    differing = sum(row[1] + row[2] + row[3] for row in diff_rows)
    headline = (
        f"{size} memories, process CPU per hybrid search (embedding cached, answer rendered): "
        + ", ".join(f"{row[0]} {row[1]} ms" for row in rows)
        + f" ({100 * (last - first) / first:+.0f}% {labels[-1]} against {labels[0]}); "
        + (f"the same answers to all {len(queries)} queries" if not differing else f"{differing} answers differ")
    )
    text = "\n".join([
        f"# Process CPU per search, source trees side by side, {size} memories",
        "",
        common.machine_markdown(),
        f"- load on the machine: {args.note or '(not stated)'}",
        f"- bucket: {load.describe()}",
        "- trees: " + "; ".join(f"{label} = {tree}" for label, tree in trees),
        f"- {len(queries)} queries of {args.query_file.name}, default ranking, signals in the calling thread; "
        f"{args.repeat} turns per tree (in alternation), {args.passes} timed passes per turn",
        "",
        "## CPU per search (medians over every pass of every turn)",
        "",
        common.markdown_table(("tree", "process CPU ms", "range over passes", "backend CPU ms", "wall ms",
                               "load (1 min) after each turn"), rows),  # fmt: skip
        "",
        "Process CPU: the search's Python (the statements' parameters and rows, fusion, boosts, the ranking "
        "steps) and rendering the hits as the view does, without the query embedding (cached by the first "
        "pass in every tree). Backend CPU: the connection's PostgreSQL backend (10 ms ticks).",
        "",
        f"## Answers against {labels[0]} turn 1 (queries that differ, with explain)",
        "",
        common.markdown_table(("turn", "ids or order", "scores only", "anything else (explain)"), diff_rows),
        "",
    ])  # fmt: skip
    header = common.report_header("search_compare.py", headline, series=args.series or size)
    common.publish_report(text, out=args.out, name=f"search-compare-{size}", no_write=args.no_write, header=header)


if __name__ == "__main__":
    main()
