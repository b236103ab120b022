"""Graph extraction throughput: memories per second of the graph's extraction, as a worker runs it.

    ./engram bench graph_throughput.py --home /tmp/graph-throughput --compare before=/tmp/engram-before
    ./engram bench graph_throughput.py --rows 600 --chunk 100 --repeat 3 --no-write

What it does, step by step:

1. A child process with ``ENGRAM_HOME=--home`` (its embedded PostgreSQL, migrated here) writes the
   first ``--rows`` turns of our conversational set (bench/eval/conversations.json: user and
   assistant turns of 12 conversations) into one bucket through the write gateway
   (``memories_ingest``), one session a batch with ``sequence`` on, as an agent would: each
   memory has its sequence context. Done once; a later run on the same home reuses the bucket.
2. For each repeat, for each variant (``--compare LABEL=DIR``: the source tree of another
   checkout, e.g. ``git archive`` of an older commit; then this tree, "this"), in turn: a child
   process importing Engram from that tree drops the bucket's graph (entities, mentions, edges,
   the processed marks), then runs ``graph.services.extraction.graph_extract_memories`` on the
   memories in ``--chunk``-sized lists, oldest first — what one ``graph.extract_memories`` task
   does for one write batch — and reports the wall time, the time in ``_parse`` (the spaCy
   pipeline) and how many texts the pipeline parsed. The variants alternate, so a load that comes
   and goes on a shared machine falls on each of them alike.

The report gives each variant's memories/s per repeat and their median. It measures one process
on one bucket, with nothing else of Engram running: the worker's share of a busy server is not
in it. The machine's load during the run is stated, since the figures move with it.
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
from datetime import UTC, datetime, timedelta
from pathlib import Path

import common

BENCH_DIR, REPO_ROOT = common.BENCH_DIR, common.REPO_ROOT
BUCKET_NAME = "graph-throughput"


def log(msg: str) -> None:
    print(f"[graph_throughput] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Child side: runs with Engram imported from ``--tree``.
# --------------------------------------------------------------------------------------------


def _django(tree: Path) -> None:
    sys.path.insert(0, str(tree))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "engram_site.settings")
    import django

    django.setup()


def child_setup(request: dict) -> dict:
    from django.core.management import call_command

    from engram_site.scoping import scopes_disabled
    from memories.models import Memory
    from memories.services import MemoryInput, memories_ingest
    from memories.services.buckets import bucket_create
    from tenants.models import Bucket, Tenant

    rows = request["rows"]
    call_command("migrate", verbosity=0)
    with scopes_disabled():
        tenant, _ = Tenant.objects.get_or_create(slug=BUCKET_NAME, defaults={"name": BUCKET_NAME})
        bucket = Bucket.objects.filter(tenant=tenant, name=BUCKET_NAME).first()
        if bucket is not None and Memory.objects.filter(bucket=bucket).count() == rows:
            return {"bucket_id": str(bucket.pk), "written": 0}
        if bucket is not None:
            Memory.objects.filter(bucket=bucket).delete()
        else:
            bucket = bucket_create(tenant=tenant, name=BUCKET_NAME)
        data = json.loads((BENCH_DIR / "eval" / "conversations.json").read_text())
        written = 0
        for conversation in data["conversations"]:
            for session in conversation["sessions"]:
                start = datetime.fromisoformat(session["started_at"].replace("Z", "+00:00"))
                items = [
                    MemoryInput(content=turn["content"], created_at=start + timedelta(minutes=i + 1))
                    for i, turn in enumerate(session["turns"][: rows - written])
                ]
                if items:
                    memories_ingest(bucket=bucket, items=items, sequence=True)
                    written += len(items)
                if written >= rows:
                    return {"bucket_id": str(bucket.pk), "written": written}
    return {"bucket_id": str(bucket.pk), "written": written}


def child_measure(request: dict) -> dict:
    from django.db import connection

    from engram_site.providers import nlp
    from engram_site.scoping import scopes_disabled
    from graph.models import Edge, Entity, Mention
    from graph.services import extraction
    from memories.models import Memory
    from tenants.models import Bucket

    pipeline = nlp.get_pipeline()
    pipeline("Warm up the pipeline.")
    parsed = {"texts": 0, "seconds": 0.0}
    real_pipe, real_parse = pipeline.pipe, extraction._parse

    def counting_pipe(texts, *args, **kwargs):
        texts = list(texts)
        parsed["texts"] += len(texts)
        return real_pipe(texts, *args, **kwargs)

    def timed_parse(*args, **kwargs):
        started = time.perf_counter()
        try:
            return real_parse(*args, **kwargs)
        finally:
            parsed["seconds"] += time.perf_counter() - started

    pipeline.pipe = counting_pipe
    extraction._parse = timed_parse
    with scopes_disabled():
        bucket = Bucket.objects.get(pk=request["bucket_id"])
        ids = list(Memory.objects.filter(bucket=bucket).order_by("created_at", "id").values_list("pk", flat=True))
        Edge.objects.filter(bucket=bucket).delete()
        Mention.objects.filter(bucket_id=bucket.pk).delete()
        Entity.objects.filter(bucket=bucket).delete()
        with connection.cursor() as cur:
            cur.execute("DELETE FROM graph_processed WHERE memory_id = ANY(%s)", [ids])
        chunk = request["chunk"]
        started = time.perf_counter()
        extracted = 0
        for start in range(0, len(ids), chunk):
            report = extraction.graph_extract_memories(memory_ids=ids[start : start + chunk])
            assert not report.errors and not report.skipped, report
            extracted += report.memories
        seconds = time.perf_counter() - started
        entities = Entity.objects.filter(bucket=bucket).count()
        edges = Edge.objects.filter(bucket=bucket).count()
    return {
        "memories": extracted,
        "seconds": seconds,
        "parse_seconds": parsed["seconds"],
        "texts_parsed": parsed["texts"],
        "entities": entities,
        "edges": edges,
        "load": os.getloadavg()[0],
    }


CHILD_TASKS = {"setup": child_setup, "measure": child_measure}


# --------------------------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------------------------


def run_child(task: str, tree: Path, request: dict, home: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        req, res = Path(tmp) / "request.json", Path(tmp) / "result.json"
        req.write_text(json.dumps(request))
        env = {**os.environ, "ENGRAM_HOME": str(home), "PYTHONPATH": str(tree)}
        script = str(Path(__file__).resolve())
        command = [sys.executable, script, "--child", task, "--tree", str(tree), str(req), str(res)]
        subprocess.run(command, env=env, check=True, cwd=str(tree))
        return json.loads(res.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", default=str(Path(tempfile.gettempdir()) / "engram-graph-throughput"))
    parser.add_argument("--rows", type=int, default=600, help="memories written and extracted (default 600)")
    parser.add_argument("--chunk", type=int, default=100, help="memories per extraction call (a write batch)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--compare", action="append", default=[], metavar="LABEL=DIR",
                        help="another source tree measured alternately with this one")  # fmt: skip
    parser.add_argument("--label", default="")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--child", choices=sorted(CHILD_TASKS), help=argparse.SUPPRESS)
    parser.add_argument("--tree", help=argparse.SUPPRESS)
    parser.add_argument("paths", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        _django(Path(args.tree))
        request_path, result_path = args.paths
        result = CHILD_TASKS[args.child](json.loads(Path(request_path).read_text()))
        Path(result_path).write_text(json.dumps(result))
        return 0

    home = Path(args.home)
    home.mkdir(parents=True, exist_ok=True)
    variants = [tuple(item.split("=", 1)) for item in args.compare] + [("this", str(REPO_ROOT))]
    log(f"writing {args.rows} memories into {home} (once)")
    setup = run_child("setup", REPO_ROOT, {"rows": args.rows}, home)
    log(f"bucket {setup['bucket_id']}: {setup['written']} memories written now")
    results: dict[str, list[dict]] = {label: [] for label, _ in variants}
    for repeat in range(args.repeat):
        for label, tree in variants:
            result = run_child("measure", Path(tree), {"bucket_id": setup["bucket_id"], "chunk": args.chunk}, home)
            results[label].append(result)
            log(
                f"repeat {repeat + 1} {label}: {result['memories'] / result['seconds']:.1f} memories/s "
                f"(parse {result['parse_seconds']:.1f} of {result['seconds']:.1f} s, {result['texts_parsed']} texts "
                f"parsed; load {result['load']:.1f})"
            )

    lines = [
        "| variant | memories/s per repeat | median | parse share | texts parsed | entities / edges | load (1 min) |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    medians = {}
    for label, runs in results.items():
        rates = [r["memories"] / r["seconds"] for r in runs]
        medians[label] = statistics.median(rates)
        share = statistics.median(r["parse_seconds"] / r["seconds"] for r in runs)
        loads = ", ".join(f"{r['load']:.1f}" for r in runs)
        lines.append(
            f"| {label} | {', '.join(f'{x:.1f}' for x in rates)} | {medians[label]:.1f} | {share:.0%} "
            f"| {runs[-1]['texts_parsed']} | {runs[-1]['entities']} / {runs[-1]['edges']} "
            f"| {loads} |"
        )
    table = "\n".join(lines)
    print(table)
    if args.no_write:
        return 0
    info = common.machine_info()
    suffix = f"-{args.label}" if args.label else ""
    path = common.RESULTS_DIR / f"graph-throughput-{datetime.now(UTC):%Y-%m-%d}{suffix}.md"
    others = ", ".join(f"{label} {medians[label]:.1f}" for label, _ in variants[:-1])
    headline = (
        f"{args.rows} conversational memories, {args.chunk} a call: {medians['this']:.1f} memories/s (median of "
        f"{args.repeat})" + (f"; {others} in the same run" if others else "")
    )
    header = common.report_header(__file__, headline, series=str(args.rows), info=info)
    trees = "\n".join(f"  - {label}: {tree}" for label, tree in variants)
    path.write_text(
        f"{header}\n# Graph extraction throughput{f' ({args.label})' if args.label else ''}\n\n"
        f"{common.machine_markdown(info)}\n- data: the first {args.rows} turns of bench/eval/conversations.json, "
        f"one bucket, sequence on\n- variants (source trees):\n{trees}\n\n{table}\n"
    )
    print(f"\nwrote {path.relative_to(BENCH_DIR.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
