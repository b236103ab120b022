"""Requests against background work: ingest and search through HTTP on ``./engram serve`` with
the worker off, on at the web server's priority, on at a lower one (ENGRAM_WORKER_NICE), and
with the pause for requests (ENGRAM_WORKER_YIELD_SECONDS: before each task and at the pause
points between slices of a long one; engram_site/activity.py). "defaults" is ./engram serve
with no settings of its own.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/background_yield.py --rows 10000 --batch 500

Each condition starts ``./engram serve`` on a fresh home (embedded PostgreSQL, filesystem
broker), creates a tenant, writes the first ``--rows`` rows of ``bench/data/corpus-100k.jsonl``
in batches of ``--batch`` (one client, ``sequence`` at its default), and times it: items/s.
Right after the last batch, while the worker (when on) still works through the backlog the
writes queued, it sends ``--searches`` hybrid searches one after another and reports their
p50/p95. Then it waits for the backlog to drain — no message left in the embedded broker's queue,
every memory classified and seen by the graph extractor — and reports how long that took, and
sends the same searches again with the worker idle ("idle"): what the derived data (graph,
labels, links) costs a search, apart from the cores the worker takes.
Conditions run one after another, in the order given, ``--repeat`` times interleaved;
medians are reported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import common
import inproc

ROOT = Path(__file__).resolve().parent.parent
ON = {"ENGRAM_RUN_WORKER": "1"}
CONDITIONS = {
    "worker off": {"ENGRAM_RUN_WORKER": "0"},
    "worker on (nice 0)": {**ON, "ENGRAM_WORKER_NICE": "0", "ENGRAM_WORKER_YIELD_SECONDS": "0"},
    "worker on (nice 10)": {**ON, "ENGRAM_WORKER_NICE": "10", "ENGRAM_WORKER_YIELD_SECONDS": "0"},
    "worker on (idle)": {**ON, "ENGRAM_WORKER_NICE": "idle", "ENGRAM_WORKER_YIELD_SECONDS": "0"},
    "worker on (nice 10 + yield)": {**ON, "ENGRAM_WORKER_NICE": "10", "ENGRAM_WORKER_YIELD_SECONDS": "10"},
    "worker on (idle + yield)": {**ON, "ENGRAM_WORKER_NICE": "idle", "ENGRAM_WORKER_YIELD_SECONDS": "10"},
    # What ./engram serve does with no settings of its own.
    "worker on (defaults)": {**ON},
}


def backlog(dsn: dict, home: Path, bucket: str) -> dict:
    """The background work still to do after the writes: messages waiting in the embedded
    broker's queue, memories not yet classified, memories the graph extractor has not seen."""
    import psycopg

    queue = home / "broker" / "queue"
    waiting = sum(1 for entry in queue.iterdir() if entry.is_file()) if queue.is_dir() else 0
    with psycopg.connect(**dsn) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT count(*) FILTER (WHERE classified_scope IS NULL), "
            "count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM graph_processed g WHERE g.memory_id = m.id)) "
            "FROM memories m WHERE bucket_id = %s",
            [bucket],
        )
        unclassified, unextracted = cur.fetchone()
    return {"queued_messages": waiting, "unclassified": unclassified, "not_in_graph": unextracted}


def run_condition(name: str, extra: dict, rows: list[str], queries: list[str], args) -> dict:
    home = Path(tempfile.mkdtemp(prefix="engram-yield-"))
    with common.engram_serve(home, port=args.port, tenant="Yield", bucket="main", settings=extra) as served:
        client = common.BenchClient(served.base_url, served.token, timeout=600)
        try:
            return _measure(name, extra, rows, queries, args, served, client)
        finally:
            client.close()


def _measure(name: str, extra: dict, rows: list[str], queries: list[str], args, served, client) -> dict:
    """The writes, the searches and the drain, on the running server."""
    home, env = served.home, served.env
    bucket = next(client.engram.list_buckets()).id
    started = time.perf_counter()
    for i in range(0, len(rows), args.batch):
        client.ingest(bucket, [{"content": text} for text in rows[i : i + args.batch]])
    ingest_seconds = time.perf_counter() - started

    def search(query: str) -> float:
        return client.search(bucket, query, mode="hybrid").elapsed * 1000

    def searches() -> list[float]:
        return [search(query) for query in queries]

    search_window = [time.time()]
    in_order = searches()
    latencies = sorted(in_order)
    search_window.append(time.time())
    drained_after = pending_at_end = drain_wait = None
    under_load = None
    if extra.get("ENGRAM_RUN_WORKER") == "1":
        dsn = inproc.run_task("dsn", {}, env)
        if args.load_seconds > 0:
            # Unbroken load: one client searching back to back, so a request is always in
            # flight or just ended. How much of the backlog moves meanwhile?
            before, t = backlog(dsn, home, bucket), time.perf_counter()
            served = 0
            while time.perf_counter() - t < args.load_seconds:
                search(queries[served % len(queries)])
                served += 1
            seconds, after = time.perf_counter() - t, backlog(dsn, home, bucket)
            under_load = {
                "seconds": seconds, "searches": served, "before": before, "after": after,
                "classified_per_s": (before["unclassified"] - after["unclassified"]) / seconds,
                "extracted_per_s": (before["not_in_graph"] - after["not_in_graph"]) / seconds,
            }  # fmt: skip
        t = time.perf_counter()
        while time.perf_counter() - t < args.drain_timeout:
            left = backlog(dsn, home, bucket)
            if pending_at_end is None:
                pending_at_end = left
            if not any(left.values()):
                drained_after = time.perf_counter() - started
                drain_wait = time.perf_counter() - t  # from the end of the searches (and load)
                break
            time.sleep(2)
    # The same searches once the worker is idle (or, worker off, again): what the data the
    # worker derived (graph, labels, links) costs a search, apart from the cores it takes.
    time.sleep(5)
    idle = sorted(searches())
    return {
        "condition": name,
        "items_per_s": len(rows) / ingest_seconds,
        "search_p50_ms": statistics.median(latencies),
        "search_p95_ms": latencies[int(0.95 * (len(latencies) - 1))],
        "search_window": search_window,
        "search_ms_in_order": [round(v, 1) for v in in_order],
        "idle_search_p50_ms": statistics.median(idle),
        "idle_search_p95_ms": idle[int(0.95 * (len(idle) - 1))],
        "drained_s": drained_after,
        "drained_after_writes_s": None if drained_after is None else drained_after - ingest_seconds,
        "pending_after_searches": pending_at_end,
        "under_load": under_load,
        "drain_wait_s": drain_wait,
    }


KEYS = (
    "items_per_s", "search_p50_ms", "search_p95_ms", "idle_search_p50_ms", "idle_search_p95_ms", "drained_s",
    "drained_after_writes_s",
)  # fmt: skip


def _median(values: list) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=10_000)
    p.add_argument("--batch", type=int, default=500)
    p.add_argument("--searches", type=int, default=100)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--port", type=int, default=8791)
    p.add_argument("--drain-timeout", type=float, default=900)
    p.add_argument(
        "--load-seconds", type=float, default=0,
        help="after the searches, keep one client searching back to back this long and report how "
        "much of the backlog moved meanwhile (worker on only)",
    )  # fmt: skip
    p.add_argument("--conditions", default=",".join(CONDITIONS))
    p.add_argument("--corpus", type=Path, default=ROOT / "bench" / "data" / "corpus-100k.jsonl")
    p.add_argument("--queries", type=Path, default=ROOT / "bench" / "data" / "queries-100k.jsonl")
    p.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = p.parse_args()
    with open(args.corpus) as handle:
        rows = [json.loads(line)["content"] for _, line in zip(range(args.rows), handle, strict=False)]
    with open(args.queries) as handle:
        queries = [json.loads(line)["query"] for _, line in zip(range(args.searches), handle, strict=False)]
    results: dict[str, list[dict]] = {}
    for _ in range(args.repeat):
        for name in args.conditions.split(","):
            result = run_condition(name, CONDITIONS[name], rows, queries, args)
            print(json.dumps(result), flush=True)
            results.setdefault(name, []).append(result)
    summary = {name: {key: _median([r[key] for r in runs]) for key in KEYS} for name, runs in results.items()}
    print(json.dumps(summary, indent=2))
    if args.out:
        args.out.write_text(json.dumps({"runs": results, "medians": summary}, indent=2))


if __name__ == "__main__":
    main()
