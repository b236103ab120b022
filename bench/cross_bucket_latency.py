"""Search across buckets through HTTP: one bucket of N memories against the same search over K
buckets of N each (``POST /api/v1/search``), p50/p95/p99 per mode.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/cross_bucket_latency.py --rows 100000 --home /tmp/lat100k

* **Data**: the first ``--rows`` rows of ``bench/data/corpus-100k.jsonl`` in the bucket ``corpus``
  (``bench/loader.py``: through the write path, resumable with ``--home``), then ``--buckets``
  - 1 copies of it made in SQL, which the write path would take ~40 min each to embed:
  ``INSERT … SELECT`` with new ids, the copy's bucket, each sequence id mapped to a new one per
  copy; text, lemmas, tsvectors, vectors and every other column copied. Then ``ANALYZE`` and a
  restart of the server, so every worker's statistics start from the new table. A copy already
  holding as many rows as the source is kept. The copies hold the same texts as the source: a
  query's best memories come three times (ties between copies are broken by id), which changes
  what is found but not the work done to find it.
* **Conditions**, per ``--modes`` mode: ``1 bucket`` (``POST /api/v1/buckets/{corpus}/search``),
  ``1 bucket via /search`` (``buckets: [corpus]``) and ``K buckets`` (``buckets``: all K), each
  from 1 client (and ``--clients`` N at once when N > 1). Each pass runs every condition once,
  interleaved; ``--repeat`` passes; the report gives medians over passes and the ratio of the
  K-bucket percentiles to the one-bucket ones. Every query text is sent once (the server caches
  query embeddings); warm-up, conditions and passes get disjoint sets with the same mix.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import common
import inproc
import loader

QUERY_NOW = "2025-07-01T00:00:00Z"
COPY_PREFIX = "corpus-copy-"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=100_000, help="memories in each bucket (default 100000)")
    p.add_argument("--buckets", type=int, default=3, help="buckets searched together (default 3)")
    p.add_argument("--repeat", type=int, default=3, help="passes over every condition (medians are reported)")
    p.add_argument("--clients", type=int, default=1, help="also run every condition from N clients at once")
    p.add_argument("--queries", type=int, default=100, help="queries per condition per pass (default 100)")
    p.add_argument("--modes", default="hybrid,keyword,vector")
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--out", type=Path, help="report path (default bench/results/cross-bucket-search-<date>.md)")
    loader.add_load_arguments(p)
    common.add_server_args(p)
    args = p.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not set(args.modes) <= {"keyword", "vector", "hybrid"}:
        p.error("modes are keyword, vector, hybrid")
    if args.buckets < 2 or min(args.rows, args.repeat, args.clients, args.queries) < 1:
        p.error("--buckets must be at least 2; --rows, --repeat, --clients and --queries positive")
    if args.base_url or not args.home:
        p.error("the copies are made in the private server's database, kept between its two starts: give --home")
    return args


# --------------------------------------------------------------------------------------------
# Copies in SQL
# --------------------------------------------------------------------------------------------


def _columns(cur) -> list[str]:
    cur.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'memories' "
        "AND is_generated = 'NEVER' ORDER BY ordinal_position"
    )
    return [row[0] for row in cur.fetchall()]


def make_copies(dsn: dict, source: str, copies: list[str]) -> tuple[list[str], int]:
    """Fill each bucket of ``copies`` with the rows of ``source`` (unless it already holds as
    many); what was done, for the report, and the rows of the table then."""
    import psycopg

    done = []
    with psycopg.connect(**dsn, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM memories WHERE bucket_id = %s", [source])
        total = cur.fetchone()[0]
        columns = _columns(cur)
        picked = []
        for column in columns:
            if column == "id":
                picked.append("gen_random_uuid()")
            elif column == "bucket_id":
                picked.append("%(copy)s::uuid")
            elif column == "sequence_id":
                # A sequence of the copy is its own: a new id derived from the source's and the copy's.
                picked.append("md5(sequence_id::text || %(copy)s)::uuid")  # NULL stays NULL
            else:
                picked.append(column)
        insert = (
            f"INSERT INTO memories ({', '.join(columns)}) SELECT {', '.join(picked)} FROM memories "
            "WHERE bucket_id = %(source)s::uuid"
        )
        for copy in copies:
            cur.execute("SELECT count(*) FROM memories WHERE bucket_id = %s", [copy])
            if cur.fetchone()[0] == total:
                done.append(f"{copy}: already held {total} rows")
                continue
            common.log(f"copying {total} rows into bucket {copy} (SQL)")
            cur.execute("DELETE FROM memories WHERE bucket_id = %s", [copy])
            started = time.perf_counter()
            cur.execute(insert, {"copy": copy, "source": source})
            seconds = time.perf_counter() - started
            done.append(f"{copy}: {total} rows copied in {seconds:.0f}s")
            common.log(done[-1])
        cur.execute("ANALYZE memories")
        cur.execute("SELECT count(*) FROM memories")
        return done, cur.fetchone()[0]


# --------------------------------------------------------------------------------------------
# Passes
# --------------------------------------------------------------------------------------------


def _send(client: common.BenchClient, target: dict, query: dict, mode: str, limit: int) -> common.Response:
    body: dict[str, Any] = {"query": query["query"], "mode": mode, "limit": limit, "now": QUERY_NOW}
    if target["buckets"] is None:
        return client.request("POST", f"/api/v1/buckets/{target['bucket']}/search", body, expect=200)
    return client.request("POST", "/api/v1/search", {**body, "buckets": target["buckets"]}, expect=200)


def run_pass(clients: list, target: dict, queries: list[dict], mode: str, limit: int) -> dict:
    n = len(clients)
    latencies: list[list[float]] = [[] for _ in range(n)]
    errors: list[str] = []
    spread: Counter = Counter()  # results per bucket
    found = Counter()
    lock = threading.Lock()

    def worker(i: int, go) -> None:
        go()
        for q in queries[i::n]:
            try:
                resp = _send(clients[i], target, q, mode, limit)
            except (common.ApiError, OSError) as exc:
                with lock:
                    errors.append(str(exc)[:200])
                continue
            latencies[i].append(resp.elapsed)
            with lock:
                for hit in resp.data["results"]:
                    spread[hit.get("bucket_id", target["bucket"])] += 1
                if q.get("source_content"):
                    found["asked"] += 1
                    found["found"] += any(h["content"] == q["source_content"] for h in resp.data["results"])

    wall = common.run_together(worker, n, "search")
    flat = [x for per in latencies for x in per]
    return {
        "summary": common.latency_summary(flat),
        "qps": len(flat) / wall if wall else 0.0,
        "errors": errors,
        "spread": dict(spread),
        "source_asked": found["asked"],
        "source_found": found["found"],
    }


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def _med(passes: list[dict], key: str) -> float | None:
    values = [p["summary"][key] for p in passes if p["summary"].get("count")]
    return common.median(values) if values else None


def _named(text: str, names: dict[str, str]) -> str:
    for bucket_id, name in names.items():
        text = text.replace(bucket_id, name)
    return text


def build_report(ctx: dict) -> str:
    args, passes, targets = ctx["args"], ctx["passes"], ctx["targets"]
    k = args.buckets
    lines = [
        f"# Search across buckets: 1 bucket against {k} buckets of {args.rows} memories",
        "",
        common.machine_markdown(ctx["machine"]),
        f"- server: {ctx['target']}",
        f"- data: first {args.rows} rows of `{args.corpus.name}` in bucket `corpus`; {ctx['load']}",
        f"- copies (SQL): {'; '.join(_named(c, ctx['names']) for c in ctx['copies'])}; table: {ctx['table_rows']} rows",
        f"- queries: {args.queries} per condition per pass, every text sent once; limit {args.limit}; "
        f"`now` = {QUERY_NOW}; no filters",
        f"- {args.repeat} passes; each runs every condition once, interleaved",
        "",
        "```",
        ctx["command"],
        "```",
        "",
        "## Latency (ms through HTTP; medians over passes)",
        "",
    ]
    headers = ["mode", "clients", "searched", "p50", "p95", "p99", "p95 min–max", "queries/s", "source in top k",
               "errors"]  # fmt: skip
    rows = []
    ratios = []
    levels = sorted({1, args.clients})
    for mode in args.modes:
        for n in levels:
            one = None
            for label in targets:
                mine = [p for p in passes if p["mode"] == mode and p["clients"] == n and p["target"] == label]
                p50, p95, p99 = (_med(mine, key) for key in ("p50", "p95", "p99"))
                p95s = [p["summary"]["p95"] for p in mine if p["summary"].get("count")]
                asked = sum(p["source_asked"] for p in mine)
                hit = sum(p["source_found"] for p in mine)
                rows.append([
                    mode, n, label, f"{p50:.1f}", f"{p95:.1f}", f"{p99:.1f}", f"{min(p95s):.1f}–{max(p95s):.1f}",
                    f"{common.median([p['qps'] for p in mine]):.1f}",
                    f"{100 * hit / asked:.1f}% of {asked}" if asked else "n/a",
                    sum(len(p["errors"]) for p in mine),
                ])  # fmt: skip
                if label == "1 bucket":
                    one = (p50, p95)
                elif label.startswith(f"{k} buckets") and one:
                    ratios.append([mode, n, f"{p50 / one[0]:.2f}", f"{p95 / one[1]:.2f}"])
    lines += [common.markdown_table(headers, rows, "lrl" + "r" * (len(headers) - 3)), ""]
    lines += [f"## {k} buckets against 1 (ratio of the medians)", ""]
    lines += [common.markdown_table(["mode", "clients", "p50 ratio", "p95 ratio"], ratios, "lrrr"), ""]
    spread: dict[str, Counter] = {}
    for p in passes:
        if p["target"].startswith(f"{k} buckets"):
            spread.setdefault(p["mode"], Counter()).update(p["spread"])
    names = ctx["names"]
    lines += [
        f"## Where the {k}-bucket results came from",
        "",
        common.markdown_table(
            ["mode", *[names[b] for b in ctx["bucket_ids"]]],
            [[mode, *[c.get(b, 0) for b in ctx["bucket_ids"]]] for mode, c in spread.items()],
            "l" + "r" * len(ctx["bucket_ids"]),
        ),
        "",
        "The copies hold the same texts as `corpus`, so a question's best memories are found once per "
        "bucket (ties broken by id); `source in top k` counts a question as answered when any copy of its "
        "source memory is among the results.",
        "",
    ]
    lines += ["## Raw passes", ""]
    raw = [
        [p["pass"], p["mode"], p["clients"], p["target"], p["summary"].get("count", 0),
         *[f"{p['summary'][key]:.1f}" if p["summary"].get("count") else "n/a" for key in ("p50", "p95", "p99", "max")],
         f"{p['qps']:.1f}", len(p["errors"])]
        for p in passes
    ]  # fmt: skip
    headers = ["pass", "mode", "clients", "searched", "n", "p50", "p95", "p99", "max", "queries/s", "errors"]
    lines += [common.markdown_table(headers, raw, "rlrl" + "r" * 7), ""]
    errors = [e for p in passes for e in p["errors"]]
    if errors:
        lines += ["## Errors (first 10)", "", *[f"- `{e}`" for e in errors[:10]], ""]
    return "\n".join(lines)


def headline(passes: list[dict], args: argparse.Namespace) -> str:
    """K buckets against 1, one client: the ratio of the medians, p50 and p95, per mode."""
    parts = []
    for mode in args.modes:
        mine = [p for p in passes if p["mode"] == mode and p["clients"] == 1]
        one = [p for p in mine if p["target"] == "1 bucket"]
        many = [p for p in mine if p["target"].startswith(f"{args.buckets} buckets")]
        ratios = [
            f"{b / a:.2f}×" if a and b else "n/a"
            for a, b in ((_med(one, key), _med(many, key)) for key in ("p50", "p95"))
        ]
        parts.append(f"{mode} p50 {ratios[0]} / p95 {ratios[1]}")
    return f"{args.buckets} buckets against 1, 1 client: " + ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    machine, command = common.machine_info(), common.command_line()
    out = args.out or common.default_report_path("cross-bucket-search")
    pool, _info = loader.query_pool(args.corpus, args.rows)
    levels = sorted({1, args.clients})
    labels = ["1 bucket", "1 bucket via /search", f"{args.buckets} buckets via /search"]
    conds = [(mode, n, label) for n in levels for mode in args.modes for label in labels]
    slots = loader.deal(pool, 1 + args.repeat * len(conds), args.queries)
    warm, pass_slots = slots[0], slots[1:]

    # First server: load the source bucket, create the copies' buckets, fill them in SQL.
    with common.server_from_args(args, tenant=loader.TENANT) as target:
        load = loader.load(target, args)
        common.log(load.describe())
        with target.client() as client:
            copies = []
            for i in range(2, args.buckets + 1):
                name = f"{COPY_PREFIX}{i}"
                copies.append(client.find_bucket(name) or client.create_bucket(name, "copy of corpus (SQL)"))
        env, _ = inproc.child_env(private_env=target.private.env())
        dsn = inproc.run_task("dsn", {}, env)
        copied, table_rows = make_copies(dsn, load.bucket_id, copies)

    # Second server: every worker starts with the statistics of the table as it now is.
    with common.server_from_args(args, tenant=loader.TENANT) as target:
        bucket_ids = [load.bucket_id, *copies]
        names = {load.bucket_id: "corpus", **{b: f"{COPY_PREFIX}{i}" for i, b in enumerate(copies, start=2)}}
        targets = {
            labels[0]: {"bucket": load.bucket_id, "buckets": None},
            labels[1]: {"bucket": load.bucket_id, "buckets": [load.bucket_id]},
            labels[2]: {"bucket": load.bucket_id, "buckets": bucket_ids},
        }
        clients = [target.client(timeout=300) for _ in range(max(levels))]
        try:
            common.log(f"warm-up: {len(warm)} queries")
            for i, (mode, _n, label) in enumerate(conds):
                run_pass(clients, targets[label], warm[i :: len(conds)], mode, args.limit)
            passes = []
            slot = 0
            for rep in range(1, args.repeat + 1):
                for mode, n, label in conds:
                    result = run_pass(clients[:n], targets[label], pass_slots[slot], mode, args.limit)
                    slot += 1
                    result.update({"pass": rep, "mode": mode, "clients": n, "target": label})
                    passes.append(result)
                    s = result["summary"]
                    common.log(
                        f"[{rep}/{args.repeat}] {mode:7s} clients={n} {label:24s}: "
                        + (f"p50 {s['p50']:.1f} p95 {s['p95']:.1f} p99 {s['p99']:.1f} ms" if s.get("count") else "-")
                        + (f", {len(result['errors'])} errors" if result["errors"] else "")
                    )
        finally:
            for c in clients:
                c.close()
        report = build_report(
            {
                "args": args, "passes": passes, "targets": targets, "machine": machine, "command": command,
                "target": target.describe(), "load": load.describe(), "copies": copied, "table_rows": table_rows,
                "names": names, "bucket_ids": bucket_ids,
            }
        )  # fmt: skip
    header = common.report_header(__file__, headline(passes, args), series=common.size_label(args.rows), info=machine,
                                  command=command)  # fmt: skip
    common.write_report(report, out, header=header)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
