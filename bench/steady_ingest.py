"""Derived data under a steady ingest: does the background work keep up, and what do searches
pay meanwhile? On ``./engram serve`` with its defaults (worker and beat on).

    ./engram bench steady_ingest.py --rate 50 --seconds 600

One client writes the rows of ``bench/data/corpus-100k.jsonl`` at ``--rate`` memories a second
(a batch of ``--batch`` every ``batch / rate`` seconds, on a fixed clock: a late batch is not
made up for by a burst) for ``--seconds``; a second client searches once a second
(``--search-every``) with the pool of ``queries-100k.jsonl``. Every ``--sample`` seconds the
backlog is read in SQL: messages waiting in the embedded broker's queue and, of the bucket's
memories, those without an embedding, not classified, not yet seen by the graph extractor,
without any key document of their text ("no key": no key signal finds them), with one marked to
be made again ("key due again": searched meanwhile; the graph marks the keys of every memory
naming an entity whose descriptions changed), and those still waiting for the near-duplicate,
contradiction and link checks (the checks' list, on servers that have one); and the machine's
load average, since the machine may be shared. After the last write the searches go on until the
backlog has drained (or ``--drain-timeout``), then the same searches run once more on the
idle server.

The report: the backlog over time (the question is whether it stays bounded or grows with the
writes), how long it took to drain after the last write, the rate the writes actually reached,
and search p50/p95 while writing, while draining and idle, with their ratios (issue 51: search
p95 during ingest and enrichment within 1.3x of idle).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import common
import inproc

ROOT = Path(__file__).resolve().parent.parent


def backlog(dsn: dict, home: Path, bucket: str) -> dict:
    import psycopg

    queue = home / "broker" / "queue"
    waiting = sum(1 for entry in queue.iterdir() if entry.is_file()) if queue.is_dir() else 0
    with psycopg.connect(**dsn) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT count(*), "
            "count(*) FILTER (WHERE m.embedding IS NULL), "
            "count(*) FILTER (WHERE m.classified_scope IS NULL), "
            "count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM graph_processed g WHERE g.memory_id = m.id)), "
            # No key searched for the memory's text; a key searched but marked to be made again.
            "count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM memory_keys k WHERE k.memory_id = m.id "
            "                                   AND k.text_hash IS NOT DISTINCT FROM m.text_hash)), "
            "count(*) FILTER (WHERE EXISTS (SELECT 1 FROM memory_keys k WHERE k.memory_id = m.id "
            "                               AND k.text_hash IS NOT DISTINCT FROM m.text_hash AND k.stale)) "
            "FROM memories m WHERE m.bucket_id = %s",
            [bucket],
        )
        total, unembedded, unclassified, unextracted, unkeyed, stale_keys = cur.fetchone()
        # The near-duplicate, contradiction and link checks' list (maintenance 0011; older servers
        # queued those checks per write, with no list to count).
        cur.execute("SELECT to_regclass('maintenance_pending_comparisons') IS NOT NULL")
        unchecked = None
        if cur.fetchone()[0]:
            cur.execute(
                "SELECT count(*) FROM maintenance_pending_comparisons p JOIN memories m ON m.id = p.memory_id "
                "WHERE m.bucket_id = %s",
                [bucket],
            )
            unchecked = cur.fetchone()[0]
    return {
        "load": os.getloadavg()[0],  # the machine's, not only this server's
        "memories": total,
        "queued_messages": waiting,
        "unembedded": unembedded,
        "unclassified": unclassified,
        "not_in_graph": unextracted,
        "without_key": unkeyed,
        "stale_key": stale_keys,
        "unchecked": unchecked,
    }


def _pending(b: dict) -> int:
    return (
        b["unembedded"] + b["unclassified"] + b["not_in_graph"] + b["without_key"] + b.get("stale_key", 0)
        + (b.get("unchecked") or 0)
    )  # fmt: skip


class Searcher(threading.Thread):
    """Searches once every ``every`` seconds, labelling each latency with the phase it ran in."""

    def __init__(self, client: common.BenchClient, bucket: str, queries: list[str], every: float):
        super().__init__(daemon=True)
        self.client, self.bucket, self.queries, self.every = client, bucket, queries, every
        self.phase = "writing"
        self.latencies: dict[str, list[float]] = {}
        self.errors = 0
        self.stop = threading.Event()

    def run(self) -> None:
        n = 0
        next_at = time.perf_counter()
        while not self.stop.is_set():
            phase = self.phase
            try:
                ms = self.client.search(self.bucket, self.queries[n % len(self.queries)], mode="hybrid").elapsed * 1000
                self.latencies.setdefault(phase, []).append(ms)
            except Exception:
                self.errors += 1
            n += 1
            next_at += self.every
            self.stop.wait(max(0.0, next_at - time.perf_counter()))


def run(args, rows: list[str], queries: list[str]) -> dict:
    home = Path(tempfile.mkdtemp(prefix="engram-steady-"))
    settings = dict(item.split("=", 1) for item in args.set)
    with common.engram_serve(home, port=args.port, tenant="Steady", bucket="main", settings=settings,
                             keep_home=args.keep_home) as served:  # fmt: skip
        writer = common.BenchClient(served.base_url, served.token, timeout=600)
        searcher_client = common.BenchClient(served.base_url, served.token, timeout=600)
        try:
            return _measure(args, rows, queries, served, writer, searcher_client)
        finally:
            writer.close()
            searcher_client.close()


def _measure(args, rows: list[str], queries: list[str], served: common.Served, writer, searcher_client) -> dict:
    """The writes, the searches and the backlog samples, on the running server."""
    home, env = served.home, served.env
    bucket = next(writer.engram.list_buckets()).id
    dsn = inproc.run_task("dsn", {}, env)
    # A few memories first, so that the first searches have something to rank.
    writer.ingest(bucket, [{"content": text} for text in rows[: args.batch]])
    rows = rows[args.batch :]

    searcher = Searcher(searcher_client, bucket, queries, args.search_every)
    samples: list[dict] = []
    started = time.perf_counter()
    next_sample = started
    interval = args.batch / args.rate
    written = 0
    write_ms: list[float] = []
    searcher.start()
    while time.perf_counter() - started < args.seconds and written + args.batch <= len(rows):
        due = started + (written // args.batch) * interval
        now = time.perf_counter()
        if now < due:
            wake = min(due, next_sample) if next_sample > now else due
            time.sleep(wake - now)  # sleep-ok: the writer's clock
            continue
        if now >= next_sample:
            samples.append({"t": round(now - started, 1), "phase": "writing", **backlog(dsn, home, bucket)})
            next_sample += args.sample
        t = time.perf_counter()
        writer.ingest(bucket, [{"content": text} for text in rows[written : written + args.batch]])
        write_ms.append((time.perf_counter() - t) * 1000)
        written += args.batch
    write_seconds = time.perf_counter() - started
    searcher.phase = "draining"
    drained_after = None
    while time.perf_counter() - started < write_seconds + args.drain_timeout:
        state = backlog(dsn, home, bucket)
        samples.append({"t": round(time.perf_counter() - started, 1), "phase": "draining", **state})
        if _pending(state) == 0 and state["queued_messages"] == 0:
            drained_after = time.perf_counter() - started - write_seconds
            break
        time.sleep(args.sample)  # sleep-ok: sampling interval
    searcher.phase = "idle"
    idle_until = time.perf_counter() + args.idle_seconds
    while time.perf_counter() < idle_until:
        time.sleep(1)  # sleep-ok: the searcher thread runs meanwhile
    searcher.stop.set()
    searcher.join(timeout=60)
    return {
        "rate_asked": args.rate,
        "rate_reached": written / write_seconds,
        "written": written + args.batch,
        "write_seconds": write_seconds,
        "write_p95_ms": common.percentile(write_ms, 95) if write_ms else None,
        "drained_after_s": drained_after,
        "samples": samples,
        "search_ms": searcher.latencies,
        "search_errors": searcher.errors,
    }


def report(result: dict, args) -> tuple[str, str]:
    lat = result["search_ms"]

    def stats(phase: str) -> tuple[str, str, int]:
        values = lat.get(phase) or []
        if not values:
            return "—", "—", 0
        return f"{statistics.median(values):.1f}", f"{common.percentile(values, 95):.1f}", len(values)

    idle_p95 = common.percentile(lat["idle"], 95) if lat.get("idle") else None
    rows = []
    for phase in ("writing", "draining", "idle"):
        p50, p95, n = stats(phase)
        ratio = "—"
        if idle_p95 and lat.get(phase):
            ratio = f"{common.percentile(lat[phase], 95) / idle_p95:.2f}×"
        rows.append((phase, n, p50, p95, ratio))
    backlog_rows = [
        (s["t"], s["phase"], s["memories"], s["queued_messages"], s["unembedded"], s["unclassified"],
         s["not_in_graph"], s["without_key"], s.get("stale_key", "—"),
         "—" if s.get("unchecked") is None else s["unchecked"],
         f"{s['load']:.1f}" if "load" in s else "—")
        for s in result["samples"]
    ]  # fmt: skip
    last_writing = [s for s in result["samples"] if s["phase"] == "writing"]
    peak = max((_pending(s) for s in result["samples"]), default=0)
    drained = result["drained_after_s"]
    drain_text = f"in {drained:.0f} s" if drained is not None else "NOT within the timeout"
    headline = (
        f"steady {result['rate_reached']:.1f} memories/s for {result['write_seconds']:.0f} s: "
        f"backlog at the last sample while writing {_pending(last_writing[-1]) if last_writing else 0} "
        f"(peak {peak}), drained {drain_text} "
        f"after the last write; search p95 writing {rows[0][3]} ms, idle {rows[2][3]} ms ({rows[0][4]})"
    )
    text = "\n".join(
        [
            f"# Steady ingest on ./engram serve ({time.strftime('%Y-%m-%d')})",
            "",
            f"- {common.machine_markdown()}",
            f"- load: {args.note}" if args.note else "- load: (not stated)",
            f"- settings: {', '.join(args.set) if args.set else './engram serve defaults'}",
            f"- asked {args.rate}/s in batches of {args.batch} for {args.seconds} s; reached "
            f"{result['rate_reached']:.1f}/s ({result['written']} memories); write p95 {result['write_p95_ms']:.0f} ms",
            f"- search errors: {result['search_errors']}",
            "",
            "## Searches, one a second, by phase",
            "",
            common.markdown_table(("phase", "searches", "p50 ms", "p95 ms", "p95 vs idle"), rows),
            "",
            "## Backlog over time (memories still waiting for each kind of derived data)",
            "",
            common.markdown_table(
                (
                    "t s",
                    "phase",
                    "memories",
                    "queued messages",
                    "no embedding",
                    "unclassified",
                    "not in graph",
                    "no key",
                    "key due again",
                    "unchecked",
                    "load",
                ),
                backlog_rows,
            ),
            "",
        ]
    )
    return text, headline


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate", type=float, default=50.0, help="memories a second")
    p.add_argument("--seconds", type=float, default=600.0)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--sample", type=float, default=15.0, help="seconds between backlog samples")
    p.add_argument("--search-every", type=float, default=1.0)
    p.add_argument("--drain-timeout", type=float, default=900.0)
    p.add_argument("--idle-seconds", type=float, default=60.0)
    p.add_argument("--port", type=int, default=8792)
    p.add_argument("--corpus", type=Path, default=ROOT / "bench" / "data" / "corpus-100k.jsonl")
    p.add_argument("--queries", type=Path, default=ROOT / "bench" / "data" / "queries-100k.jsonl")
    p.add_argument("--note", default="", help="what else ran on the machine")
    p.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE",
        help="a server setting (environment), e.g. ENGRAM_WORKER_YIELD_SHARE=1; repeatable",
    )  # fmt: skip
    p.add_argument("--keep-home", action="store_true")
    p.add_argument("--series", default="")
    p.add_argument("--out", type=Path)
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--json-out", type=Path)
    args = p.parse_args()
    needed = int(args.rate * args.seconds) + args.batch
    with open(args.corpus) as handle:
        rows = [json.loads(line)["content"] for _, line in zip(range(needed), handle, strict=False)]
    with open(args.queries) as handle:
        queries = [json.loads(line)["query"] for line in handle]
    result = run(args, rows, queries)
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2))
    text, headline = report(result, args)
    header = common.report_header("steady_ingest.py", headline, series=args.series)
    common.publish_report(text, out=args.out, name="steady-ingest", no_write=args.no_write, header=header)


if __name__ == "__main__":
    main()
