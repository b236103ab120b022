"""Searches right after a burst of writes into a new bucket, on ``./engram serve`` (worker on), with
the planner-statistics follow-up off (``ENGRAM_ANALYZE_THRESHOLD=0``: only autovacuum analyzes)
and on (the default; maintenance/services/statistics.py).

    ./engram bench burst_search.py --rows 3000 --batch 500 --searches 100 --repeat 3

Each run starts ``./engram serve`` on a fresh ``ENGRAM_HOME`` (embedded PostgreSQL, filesystem
broker, the worker and beat as ``serve`` runs them), creates a tenant, warms the server up (50
memories in a bucket of their own, 32 searches from 8 threads, each on a new connection: models
and connections loaded in both web processes, as on a server in use), creates a new bucket, writes the
first ``--rows`` rows of ``bench/data/corpus-100k.jsonl`` to it in batches of ``--batch`` (one
client, ``sequence`` at its default), then at once sends ``--searches`` hybrid searches from
``--clients`` threads together ("at once"), then ``--searches`` more one after another
("serial"); every query text is sent once per run. It reports p50/p95/max of each, how many took
over 200 ms, and when ``memories`` was last analyzed (by the follow-up or by autovacuum) relative
to the end of the writes. ``off-large`` and ``on-large``: the same, with autovacuum analyzing
``memories`` as it would a table of 30,000 rows (``autovacuum_analyze_threshold`` 3,050), so the
burst alone does not set it off (a new user's import on a server in use). Conditions alternate
(off, on, on, off, …); medians over runs.
``uptime``'s load is recorded at the start and end of every run: the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import common
import inproc

ROOT = Path(__file__).resolve().parent.parent
CONDITIONS = {
    "off": {"ENGRAM_ANALYZE_THRESHOLD": "0"},  # before: autovacuum only
    "on": {},  # the defaults
    # The same, with autovacuum analyzing memories as it would a table of 30,000 rows (at 10% +
    # 50 changed: 3,050), so the burst's 3,000 rows into the new bucket do not set it off: a new
    # user's import on a server in use. Also what a quiet machine shows, where the burst ends
    # before autovacuum's next round.
    "off-large": {"ENGRAM_ANALYZE_THRESHOLD": "0"},
    "on-large": {},
    # The defaults with the worker (and its database backends) in Linux's SCHED_IDLE class: the
    # burst's enrichment runs only on cores the searches leave.
    "idle": {"ENGRAM_WORKER_NICE": "idle"},
}
LARGE_TABLE_ANALYZE_THRESHOLD = 3050


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def analyzed(dsn: dict) -> dict:
    import psycopg

    with psycopg.connect(**dsn) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT extract(epoch FROM last_analyze), extract(epoch FROM last_autoanalyze), analyze_count,"
            " autoanalyze_count FROM pg_stat_user_tables WHERE relname = 'memories'"
        )
        manual, auto, count, autocount = cur.fetchone()
    return {"analyze": float(manual) if manual else None, "autoanalyze": float(auto) if auto else None,
            "analyze_count": count, "autoanalyze_count": autocount}  # fmt: skip


def summary(ms: list[float]) -> dict:
    ordered = sorted(ms)
    return {
        "p50": common.percentile(ordered, 50),
        "p95": common.percentile(ordered, 95),
        "max": ordered[-1],
        "over_200": sum(v > 200 for v in ordered),
    }


def warm_up(base: str, token: str, bucket: str, queries: list[str], go) -> None:
    go()
    for query in queries:
        # A connection per search: the kernel hands new connections to either web process, so
        # both have searched before the burst (a kept-alive one would warm one process only).
        with common.BenchClient(base, token, timeout=900) as fresh:
            fresh.search(bucket, query, mode="hybrid")


def run(name: str, rows: list[str], queries: list[str], args) -> dict:
    home = Path(tempfile.mkdtemp(prefix="engram-burst-", dir=args.tmp))
    settings = dict(CONDITIONS[name])
    if "ENGRAM_MODEL_CACHE" not in os.environ:
        # One ONNX export for every run (made by the first), not one per fresh home.
        settings["ENGRAM_MODEL_CACHE"] = str(Path(args.tmp or tempfile.gettempdir()) / "engram-burst-models")
    load_start = load()
    with common.engram_serve(home, port=args.port, tenant="Burst", settings=settings, ready_timeout=600,
                             stop_timeout=90, keep_home=args.keep_homes) as served:  # fmt: skip
        return _measure(name, rows, queries, args, served, load_start)


def _measure(name: str, rows: list[str], queries: list[str], args, served: common.Served, load_start: str) -> dict:
    """The burst, then the searches together and one after another, on the running server."""
    base, token, env = served.base_url, served.token, served.env
    dsn = inproc.run_task("dsn", {}, env)
    if name.endswith("-large"):
        import psycopg

        with psycopg.connect(**dsn, autocommit=True) as conn:
            threshold = LARGE_TABLE_ANALYZE_THRESHOLD
            conn.execute(f"ALTER TABLE memories SET (autovacuum_analyze_threshold = {threshold})")
    setup = common.BenchClient(base, token, timeout=900)
    # A server in use: every web process and thread has searched once (models, spaCy and
    # connections loaded) in a small bucket of its own, before the new bucket is written.
    warm = setup.create_bucket("warm-up")
    setup.ingest(warm, [{"content": text} for text in args.warm_rows])
    common.run_together(lambda i, go: warm_up(base, token, warm, args.warm_queries[i::8], go), 8, "warm")
    bucket = setup.create_bucket("imported history")
    started = time.perf_counter()
    for i in range(0, len(rows), args.batch):
        setup.ingest(bucket, [{"content": text} for text in rows[i : i + args.batch]])
    written_at, ingest_s = time.time(), time.perf_counter() - started
    common.log(f"{name}: {len(rows)} rows in {ingest_s:.0f} s")

    together: list[float] = []
    slow: list[dict] = []  # the searches over 200 ms together: when, and the server's stages
    firsts: list[dict] = []  # each client's first search: the same, and its Server-Timing as sent
    lock = threading.Lock()
    share = [queries[i :: args.clients] for i in range(args.clients)]
    first_at = time.time()

    def client(i: int, go) -> None:
        with common.BenchClient(base, token, timeout=900) as mine:
            go()
            for n, query in enumerate(share[i]):
                sent = time.time()
                answer = mine.search(bucket, query, mode="hybrid")
                elapsed = answer.elapsed * 1000
                seen = {
                    "client": i, "sent_s": round(sent - written_at, 3), "ms": round(elapsed, 1),
                    "server_timing": common.server_timing(answer.headers),
                }  # fmt: skip
                with lock:
                    together.append(elapsed)
                    if elapsed > 200:
                        slow.append(seen)
                    if n == 0:
                        # The raw header too: its descriptions say how often a stage ran ("in 3 runs").
                        header = next((v for k, v in answer.headers.items() if k.lower() == "server-timing"), "")
                        firsts.append({**seen, "header": header})

    common.run_together(lambda i, go: client(i, go), args.clients, name="searcher")
    serial = [setup.search(bucket, query, mode="hybrid").elapsed * 1000 for query in args.serial_queries]
    stats = analyzed(dsn)
    setup.close()
    moments = {k: (round(stats[k] - written_at, 1) if stats[k] else None) for k in ("analyze", "autoanalyze")}
    return {
        "condition": name,
        "ingest_s": round(ingest_s, 1),
        "searches_started_after_writes_s": round(first_at - written_at, 2),
        "together": summary(together),
        "serial": summary(serial),
        "max_ms": max(together + serial),
        "over_200": sum(v > 200 for v in together + serial),
        "last_analyze_after_writes_s": moments["analyze"],
        "last_autoanalyze_after_writes_s": moments["autoanalyze"],
        "analyze_count": stats["analyze_count"],
        "autoanalyze_count": stats["autoanalyze_count"],
        "load_start": load_start,
        "load_end": load(),
        "together_ms": [round(v, 1) for v in together],
        "together_slow": sorted(slow, key=lambda r: r["sent_s"]),
        "together_first": sorted(firsts, key=lambda r: r["sent_s"]),
        "serial_ms": [round(v, 1) for v in serial],
    }


def _median(values: list) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _moment(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:+.0f} s"


def _runs_of(header: str, stage: str) -> int:
    """How often ``stage`` ran in a request, from its raw Server-Timing (0: not at all)."""
    found = re.search(rf'(?:^|, ){re.escape(stage)};dur=[\d.]+;desc="cpu [\d.]+ ms(?: in (\d+) runs)?"', header)
    return 0 if found is None else int(found.group(1) or 1)


def first_searches(results: dict[str, list[dict]]) -> list[str]:
    """Per run, each client's first search on the new bucket: its time, its statements, how many
    times it counted the bucket's size (``stats.size``) and how long it waited for another
    thread's count (``stats.wait``) and counted document frequencies (``stats.df``; stages of
    parallel threads add up)."""
    lines = [
        "| condition | run | first searches ms | statements | size counts | stats.size / stats.wait / stats.df ms |",
        "| :--- | ---: | :--- | :--- | :--- | :--- |",
    ]
    for name, runs in results.items():
        for n, r in enumerate(runs, 1):
            firsts = r.get("together_first") or []
            if not firsts:
                continue
            stages = [f["server_timing"] for f in firsts]

            def each(key: str, stages=stages) -> str:
                return ", ".join(f"{st.get(key, 0):.0f}" for st in stages)

            times = ", ".join(f"{f['ms']:.0f}" for f in firsts)
            counts = ", ".join(str(_runs_of(f["header"], "stats.size")) for f in firsts)
            spent = "; ".join(
                f"{st.get('stats.size', 0):.0f} / {st.get('stats.wait', 0):.0f} / {st.get('stats.df', 0):.0f}"
                for st in stages
            )
            lines.append(f"| {name} | {n} | {times} | {each('db.statements')} | {counts} | {spent} |")
    return lines


def slow_searches(results: dict[str, list[dict]]) -> list[str]:
    """Per run, the searches over 200 ms together (each client's first one apart): how many,
    their median statements and median stage times (ms)."""
    keys = ("db.statements", "db", "keyword", "vector", "embed", "stats.df")
    lines = [
        "| condition | run | over 200 ms (of them first searches) | median " + " / ".join(keys) + " |",
        "| :--- | ---: | :--- | :--- |",
    ]
    for name, runs in results.items():
        for n, r in enumerate(runs, 1):
            slow = r.get("together_slow") or []
            first = {(f["client"], f["sent_s"]) for f in r.get("together_first") or []}
            later = [s["server_timing"] for s in slow if (s["client"], s["sent_s"]) not in first]
            medians = " / ".join(
                f"{statistics.median([st.get(k, 0) for st in later]):.0f}" if later else "-" for k in keys
            )
            lines.append(f"| {name} | {n} | {len(slow)} ({len(slow) - len(later)}) | {medians} |")
    return lines


def report(results: dict[str, list[dict]], args, info: dict) -> str:
    def cell(runs: list[dict], phase: str, key: str) -> str:
        return f"{_median([r[phase][key] for r in runs]):.0f}"

    lines = [
        f"# Searches right after a burst into a new bucket ({args.rows} memories, batches of {args.batch})",
        "",
        common.machine_markdown(info),
        f"- server: `./engram serve` (2 gunicorn workers x 4 threads, worker and beat on), fresh home per run; "
        f"{args.searches} hybrid searches from {args.clients} threads together, then {args.searches} one after "
        "another, right after the last write; each query text once per run",
        "- runs per condition: "
        + ", ".join(f"{name} {len(runs)}" for name, runs in results.items())
        + "; conditions alternating; medians over runs (every run below)",
        "",
        "| condition | together p50 / p95 / max ms | serial p50 / p95 / max ms | searches over 200 ms | "
        "`memories` last analyzed, from the end of the writes |",
        "| :--- | ---: | ---: | ---: | :--- |",
    ]
    for name, runs in results.items():
        when = "; ".join(
            f"follow-up {_moment(r['last_analyze_after_writes_s'])}, "
            f"autovacuum {_moment(r['last_autoanalyze_after_writes_s'])}"
            for r in runs
        )
        lines.append(
            f"| {name} | {cell(runs, 'together', 'p50')} / {cell(runs, 'together', 'p95')} / "
            f"{cell(runs, 'together', 'max')} | {cell(runs, 'serial', 'p50')} / {cell(runs, 'serial', 'p95')} / "
            f"{cell(runs, 'serial', 'max')} | {_median([r['over_200'] for r in runs]):.0f} | {when} |"
        )
    lines += ["", "Every run (ms; load = `uptime`'s 1/5/15-minute averages at start and end):", ""]
    lines.append("| condition | ingest s | together p50 / p95 / max | serial p50 / p95 / max | over 200 ms | load |")
    lines.append("| :--- | ---: | ---: | ---: | ---: | :--- |")
    for name, runs in results.items():
        for r in runs:
            t, s = r["together"], r["serial"]
            lines.append(
                f"| {name} | {r['ingest_s']:.0f} | {t['p50']:.0f} / {t['p95']:.0f} / {t['max']:.0f} | "
                f"{s['p50']:.0f} / {s['p95']:.0f} / {s['max']:.0f} | {r['over_200']} | "
                f"{r['load_start']} → {r['load_end']} |"
            )
    if any(r.get("together_first") for runs in results.values() for r in runs):
        lines += ["", "Each client's first search on the new bucket (its Server-Timing):", ""]
        lines += first_searches(results)
        lines += ["", "The other searches over 200 ms, at once (their Server-Timing):", ""]
        lines += slow_searches(results)
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=3000)
    p.add_argument("--batch", type=int, default=500)
    p.add_argument("--searches", type=int, default=100, help="searches together, and as many one after another")
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--conditions", default="off,on")
    p.add_argument("--port", type=int, default=8796)
    p.add_argument("--tmp", default=None, help="where the homes are made (default: the system's)")
    p.add_argument("--keep-homes", action="store_true")
    p.add_argument("--corpus", type=Path, default=ROOT / "bench" / "data" / "corpus-100k.jsonl")
    p.add_argument("--queries", type=Path, default=ROOT / "bench" / "data" / "queries-100k.jsonl")
    p.add_argument("--json", type=Path, help="also write every run as JSON here (after each run)")
    p.add_argument("--from-json", type=Path, help="only write the report of the runs in this JSON file")
    p.add_argument("--out", type=Path, help="the report (default bench/results/burst-search-<date>.md)")
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--series", default="", help="the report's series (bench/results_table.py)")
    args = p.parse_args()
    # kill PID unwinds through run()'s finally, which stops the server it started.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    with open(args.corpus) as handle:
        rows = [json.loads(line)["content"] for _, line in zip(range(args.rows + 50), handle, strict=False)]
    rows, args.warm_rows = rows[: args.rows], rows[args.rows :]
    with open(args.queries) as handle:
        texts = [json.loads(line)["query"] for line in handle]
    needed = 2 * args.searches + 32
    if len(texts) < needed:
        raise SystemExit(f"{args.queries} holds {len(texts)} queries; {needed} are needed")
    queries, args.serial_queries = texts[: args.searches], texts[args.searches : 2 * args.searches]
    args.warm_queries = texts[2 * args.searches : needed]
    names = args.conditions.split(",")
    info = common.machine_info()
    results: dict[str, list[dict]] = {name: [] for name in names}
    if args.from_json:
        results = json.loads(args.from_json.read_text())
        args.repeat = min(len(runs) for runs in results.values())
    for i in range(0 if args.from_json else args.repeat):
        for name in names if i % 2 == 0 else names[::-1]:
            result = run(name, rows, queries, args)
            print(json.dumps({k: v for k, v in result.items() if not k.endswith("_ms")}), flush=True)
            results[name].append(result)
            if args.json:
                args.json.write_text(json.dumps(results, indent=1))
    text = report(results, args, info)
    on = results.get("on-large") or results.get("on") or next(iter(results.values()))
    headline = (
        f"{args.rows} memories into a new bucket, then {2 * args.searches} searches: max "
        + ", ".join(f"{name} {_median([r['max_ms'] for r in runs]):.0f} ms" for name, runs in results.items())
        + f"; over 200 ms with it on: {_median([r['over_200'] for r in on]):.0f} (median of {len(on)})"
    )
    header = common.report_header("burst_search.py", headline, info=info, series=args.series)
    common.publish_report(text, out=args.out, name="burst-search", no_write=args.no_write, header=header)


if __name__ == "__main__":
    main()
