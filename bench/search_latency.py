"""Search latency through HTTP at 10k / 100k memories in one bucket: p50/p95/p99 per mode.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/search_latency.py --rows 10000 --repeat 3 --clients 4

* **Data**: the first ``--rows`` rows of ``bench/data/corpus-100k.jsonl`` in one bucket (batches
  of 1,000 from ``--load-clients`` threads, sequence=true), then the knowledge graph is extracted
  (``manage.py rebuild_graph --pending``) so graph mode has something to walk. With ``--home DIR``
  the data stays and a rerun skips (or resumes) the load: see ``bench/loader.py``.
* **Queries**: natural-language questions about the corpus, regenerated with make_corpus's own
  code (~26k distinct; those about loaded rows first). Every query text is sent **once**: the
  server caches query embeddings (``embed_query`` keeps 1,024 per process), so a repeated text
  would measure the cache, not the model. The warm-up and every (condition, pass) get disjoint
  sets with the same mix.
* **Conditions**: each ``--modes`` mode x without/with filters x 1 and ``--clients`` concurrent
  clients (threads, one keep-alive connection each). "With filters": the query's own filters
  when the generator gave it some (agent, run, attribution, tag, date window), otherwise its
  source row's ``attributed_to`` or ``agent_id``. Each pass runs every condition once
  (interleaved); ``--repeat`` passes; the report gives medians of each percentile over passes.
* **Query embedding**: ``engram_site.providers.embedding.embed_query`` on the same vector/hybrid query texts,
  in-process in a child process on the same machine (``bench/inproc.py``); its median is
  compared with the end-to-end latency. The server starts that embedding in a thread while the
  keyword SQL runs, so in hybrid mode part of it overlaps.
* **Explain probe**: a few hybrid queries with ``explain`` (untimed) show whether the vector
  signals used the HNSW index or fell back to an exact scan, without and with filters.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import common
import inproc
import loader

QUERY_NOW = "2025-07-01T00:00:00Z"  # just after the corpus ends: "now" for recency and dates


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=10_000, help="memories in the bucket (default 10000)")
    p.add_argument("--repeat", type=int, default=3, help="passes over every condition (medians are reported)")
    p.add_argument("--clients", type=int, default=4, help="concurrent clients of the concurrent condition")
    p.add_argument("--queries", type=int, default=100, help="queries per condition per pass (default 100)")
    p.add_argument("--modes", default="keyword,vector,hybrid,graph")
    p.add_argument("--limit", type=int, default=10, help="search limit (default 10)")
    loader.add_load_arguments(p)
    p.add_argument("--no-graph", action="store_true", help="do not extract the knowledge graph after loading")
    p.add_argument("--probe", type=int, default=30, help="explain-probe queries per filter condition (0: skip)")
    p.add_argument("--ranking", type=json.loads, help="ranking overrides sent with every search (JSON)")
    p.add_argument("--out", type=Path, help="report path (default bench/results/search-latency-<date>.md)")
    common.add_server_args(p)
    args = p.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not set(args.modes) <= {"keyword", "vector", "hybrid", "graph"}:
        p.error("modes are keyword, vector, hybrid, graph")
    if min(args.rows, args.repeat, args.clients, args.queries) < 1:
        p.error("--rows, --repeat, --clients and --queries must be positive")
    global RANKING
    RANKING = args.ranking
    return args


def conditions(args: argparse.Namespace) -> list[tuple[str, bool, int]]:
    levels = sorted({1, args.clients})
    return [(mode, filtered, n) for n in levels for filtered in (False, True) for mode in args.modes]


# Ranking overrides sent with every search (--ranking), e.g. to time a weight setting.
RANKING: dict | None = None


def body(query: dict, mode: str, filtered: bool, limit: int, explain: bool = False) -> dict:
    out: dict[str, Any] = {"mode": mode, "limit": limit, "now": QUERY_NOW}
    if RANKING:
        out["ranking"] = RANKING
    if filtered:
        out["filters"] = query["filters"]
    if explain:
        out["explain"] = True
    return out


def run_pass(
    clients: list[common.BenchClient], bucket: str, queries: list[dict], mode: str, filtered: bool, limit: int
) -> dict:
    """Send ``queries`` from ``len(clients)`` threads at once (round-robin split); latencies per request."""
    n = len(clients)
    latencies: list[list[float]] = [[] for _ in range(n)]
    errors: list[str] = []
    fallbacks = Counter()
    empty = [0]
    found = Counter()  # questions about a loaded row: asked, and its memory among the results
    stages: list[dict[str, float]] = []  # each answer's Server-Timing (engram_site/stopwatch.py)
    lock = threading.Lock()

    def worker(i: int, go) -> None:
        client = clients[i]
        go()
        for q in queries[i::n]:
            try:
                resp = client.search(bucket, q["query"], **body(q, mode, filtered, limit))
            except (common.ApiError, OSError) as exc:
                with lock:
                    errors.append(str(exc)[:200])
                continue
            latencies[i].append(resp.elapsed)
            data = resp.data
            with lock:
                stages.append(common.server_timing(resp.headers))
                if data["mode_used"] != mode:
                    fallbacks[data["mode_used"]] += 1
                if not data["results"]:
                    empty[0] += 1
                if q.get("source_content"):
                    found["asked"] += 1
                    found["found"] += any(hit["content"] == q["source_content"] for hit in data["results"])

    wall = common.run_together(worker, n, "search")
    flat = [x for per in latencies for x in per]
    return {
        "summary": common.latency_summary(flat),
        "qps": len(flat) / wall if wall else 0.0,
        "errors": errors,
        "fallbacks": dict(fallbacks),
        "empty": empty[0],
        "sent": len(queries),
        "source_asked": found["asked"],
        "source_found": found["found"],
        "stages": common.median_stages(stages),
    }


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}% of {whole}" if whole else "n/a"


def explain_probe(client: common.BenchClient, bucket: str, queries: list[dict], limit: int) -> dict:
    """How the vector signals were answered (hnsw / exact), from ``explain``, without and with filters."""
    out = {}
    for filtered in (False, True):
        methods: Counter = Counter()
        results = []
        for q in queries:
            data = client.search(bucket, q["query"], **body(q, "hybrid", filtered, limit, explain=True)).data
            results.append(len(data["results"]))
            for hit in data["results"][:1]:
                for signal, method in (hit.get("explain", {}).get("vector_search") or {}).items():
                    methods[f"{signal}={method}"] += 1
        out["filtered" if filtered else "unfiltered"] = {
            "queries": len(queries),
            "methods": dict(methods),
            "results_median": round(common.median(results)) if results else 0,
            "empty": sum(1 for r in results if r == 0),
        }
    return out


def build_report(ctx: dict) -> str:
    args, passes, conds = ctx["args"], ctx["passes"], ctx["conditions"]
    load, qinfo = ctx["load"], ctx["query_info"]
    lines = [
        "# Search latency through HTTP",
        "",
        common.machine_markdown(ctx["machine"]),
        f"- server: {ctx['target']}",
        f"- data: first {args.rows} rows of `{args.corpus.name}` in one bucket; {load.describe()}",
        f"- knowledge graph: {ctx['graph']}",
        f"- queries: {qinfo['distinct']} distinct generated questions, {qinfo['about_loaded']} about the loaded rows "
        f"(used first, spread evenly); {args.queries} per condition per pass, every text sent once; "
        f"limit {args.limit}; `now` = {QUERY_NOW}",
        f"- filters (per query): {ctx['filter_mix']}",
        f"- ranking: {json.dumps(args.ranking) if args.ranking else 'server defaults'}",
        f"- {args.repeat} passes; each pass runs every condition once, in this order: modes x "
        f"(unfiltered, filtered) x clients {sorted({1, args.clients})}",
        "",
        "```",
        ctx["command"],
        "```",
        "",
        "## Latency (ms, end to end through HTTP; medians over passes)",
        "",
    ]
    headers = [
        "mode", "filters", "clients", "p50", "p95", "p99", "p95 min–max", "mean", "queries/s", "source in top k",
        "empty", "errors",
    ]  # fmt: skip
    table = []
    for cond in conds:
        mine = [p for p in passes if p["condition"] == list(cond)]
        mode, filtered, n = cond
        s = [p["summary"] for p in mine if p["summary"].get("count")]
        if not s:
            table.append([mode, "yes" if filtered else "no", n, *["n/a"] * 7, sum(p["empty"] for p in mine),
                          sum(len(p["errors"]) for p in mine)])  # fmt: skip
            continue
        p95s = [x["p95"] for x in s]
        table.append(
            [
                mode,
                "yes" if filtered else "no",
                n,
                f"{common.median([x['p50'] for x in s]):.1f}",
                f"{common.median(p95s):.1f}",
                f"{common.median([x['p99'] for x in s]):.1f}",
                f"{min(p95s):.1f}–{max(p95s):.1f}",
                f"{common.median([x['mean'] for x in s]):.1f}",
                f"{common.median([p['qps'] for p in mine]):.1f}",
                _share(sum(p.get("source_found", 0) for p in mine), sum(p.get("source_asked", 0) for p in mine)),
                sum(p["empty"] for p in mine),
                sum(len(p["errors"]) for p in mine),
            ]
        )
    lines += [common.markdown_table(headers, table, "llr" + "r" * (len(headers) - 3)), ""]
    lines += [
        f"`source in top k`: of the questions about a loaded row (over all passes), the share whose answer — the "
        f"memory the generator wrote the question from — is among the {args.limit} results: a check that a faster "
        "setting did not cost quality (other memories may answer a question too, so it is a floor, not recall). "
        f"`empty`: searches with no result (over all passes). p99 of {args.queries} queries is close to their "
        "maximum: read it with the spread of the passes.",
        "",
    ]
    lines += stage_section(passes, conds)
    fallbacks = Counter()
    for p in passes:
        fallbacks.update(p["fallbacks"])
    if fallbacks:
        lines += [f"**Mode fallbacks** (`mode_used` differed from the mode asked): {dict(fallbacks)}", ""]
    emb = ctx["embed"]
    if emb:
        ms = emb["ms"]
        med = common.median(ms)
        lines += ["## Query embedding (in-process `embed_query`, same query texts)", ""]
        rows = [["embed_query", len(ms), f"{med:.1f}", f"{common.percentile(ms, 95):.1f}", f"{max(ms):.1f}"]]
        lines += [common.markdown_table(["what", "queries", "p50 ms", "p95 ms", "max ms"], rows), ""]
        shares = []
        for mode in ("vector", "hybrid"):
            for filtered in (False, True):
                mine = [p["summary"]["p50"] for p in passes if p["condition"] == [mode, filtered, 1]]
                if mine:
                    p50 = common.median(mine)
                    shares.append(f"{mode}{' filtered' if filtered else ''} 1 client: {100 * med / p50:.0f}% of p50")
        lines += [
            f"Share of the end-to-end median spent embedding the query: {'; '.join(shares) or 'n/a'}. "
            f"Embedding runtime in the child: {emb.get('runtime', 'torch')}, torch threads "
            f"{emb.get('torch_threads')} (same environment as the server). "
            "In hybrid mode the server embeds in a thread while the keyword SQL runs, so the critical path "
            "may hide part of it.",
            "",
        ]
    if ctx["probe"]:
        lines += ["## Explain probe (hybrid, untimed)", ""]
        rows = [
            [k, v["queries"], ", ".join(f"{m}: {c}" for m, c in sorted(v["methods"].items())) or "n/a",
             v["results_median"], v["empty"]]
            for k, v in ctx["probe"].items()
        ]  # fmt: skip
        lines += [common.markdown_table(["filters", "queries", "vector search used", "results (median)", "empty"],
                                        rows, "lrlrr"), ""]  # fmt: skip
        lines += [
            "From `explain.vector_search` of each query's first hit: `hnsw` = the index walk (iterative scan) "
            "answered; `exact` = the bucket (or filtered set) was scanned exactly — below 2,000 embedded rows, "
            "or after the index walk returned fewer rows than asked.",
            "",
        ]
    lines += ["## Raw passes", ""]
    headers = ["pass", "mode", "filters", "clients", "n", "p50", "p95", "p99", "max", "queries/s", "errors"]
    rows = []
    for p in passes:
        s = p["summary"]
        mode, filtered, n = p["condition"]
        rows.append(
            [p["pass"], mode, "yes" if filtered else "no", n, s.get("count", 0)]
            + [f"{s[k]:.1f}" if s.get("count") else "n/a" for k in ("p50", "p95", "p99", "max")]
            + [f"{p['qps']:.1f}", len(p["errors"])]
        )
    lines += [common.markdown_table(headers, rows, "rllr" + "r" * 7), ""]
    errors = [e for p in passes for e in p["errors"]]
    if errors:
        lines += ["## Errors (first 10)", "", *[f"- `{e}`" for e in errors[:10]], ""]
    if ctx["notes"]:
        lines += ["## Notes", "", *[f"- {n}" for n in ctx["notes"]], ""]
    return "\n".join(lines)


def stage_section(passes: list[dict], conds: list) -> list[str]:
    """Where a search's time goes, from the server's own Server-Timing: per condition, the median
    over passes of each stage's median (ms)."""
    shown = [c for c in conds if c[2] == 1]
    per = {tuple(c): [p["stages"] for p in passes if p["condition"] == list(c) and p.get("stages")] for c in shown}
    names: list[str] = []
    for runs in per.values():
        for run in runs:
            names += [n for n in run if n not in names]
    if not names:
        return []
    rows = []
    for name in names:
        row = [name]
        for c in shown:
            values = [run[name] for run in per[tuple(c)] if name in run]
            row.append(f"{common.median(values):.1f}" if values else "")
        rows.append(row)
    headers = ["stage (ms)", *[f"{m}{' filtered' if f else ''}" for m, f, _ in shown]]
    return [
        "## Where the time goes (the server's Server-Timing, 1 client; medians)",
        "",
        common.markdown_table(headers, rows, "l" + "r" * len(shown)),
        "",
        "`total`: the request in the web process (the rest of the end-to-end time is HTTP and the client); "
        "`cpu`: the request thread's CPU; `db`: time waiting on PostgreSQL (all threads); the signals run in "
        "parallel threads, so stages overlap (docs/API.md, Where the time went).",
        "",
    ]


def headline(passes: list[dict], args: argparse.Namespace) -> str:
    """Hybrid search (or the first mode measured): 1 client p50 / p95, filtered p95, N clients p95."""
    mode = "hybrid" if "hybrid" in args.modes else args.modes[0]

    def med(filtered: bool, clients: int, key: str) -> str:
        values = [p["summary"][key] for p in passes
                  if p["condition"] == [mode, filtered, clients] and p["summary"].get("count")]  # fmt: skip
        return f"{common.median(values):.1f}" if values else "n/a"

    text = f"{mode}, 1 client: p50 {med(False, 1, 'p50')} / p95 {med(False, 1, 'p95')} ms"
    text += f", filtered p95 {med(True, 1, 'p95')} ms"
    if args.clients > 1:
        text += f"; {args.clients} clients p95 {med(False, args.clients, 'p95')} ms"
    return text


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    machine, command = common.machine_info(), common.command_line()
    out = args.out or common.default_report_path("search-latency")
    conds = conditions(args)
    notes: list[str] = []
    pool, query_info = loader.query_pool(args.corpus, loader.real_rows(args))
    # Two sets for the warm-up (the probe reuses some: it is not timed), one per condition per pass.
    slots = loader.deal(pool, 2 + args.repeat * len(conds), args.queries)
    warm_queries, probe_queries, pass_slots = slots[0] + slots[1], slots[0][: args.probe], slots[2:]
    with common.server_from_args(args, tenant=loader.TENANT) as target:
        load = loader.load(target, args)
        common.log(load.describe())
        graph = "skipped (--no-graph)"
        if not args.no_graph and {"graph", "hybrid"} & set(args.modes):
            common.log("extracting the knowledge graph of new memories (rebuild_graph --pending)")
            message, seconds = loader.build_graph(target)
            graph = f"{message} ({seconds:.0f}s)"
        bucket = load.bucket_id
        n_clients = max(c[2] for c in conds)
        clients = [target.client(timeout=300) for _ in range(n_clients)]
        try:
            # Warm-up: every mode, with and without filters, from several connections (every
            # gunicorn worker loads its models and fills its statistics cache).
            common.log(f"warm-up: {len(warm_queries)} queries")
            warm_clients = clients + [target.client() for _ in range(max(0, 2 * args.workers - n_clients))]
            for i, mode in enumerate(args.modes):
                for filtered in (False, True):
                    part = warm_queries[i * 2 + filtered :: 2 * len(args.modes)]
                    run_pass(warm_clients, bucket, part, mode, filtered, args.limit)
            for extra in warm_clients[n_clients:]:
                extra.close()
            passes = []
            slot = 0
            for rep in range(1, args.repeat + 1):
                for cond in conds:
                    mode, filtered, n = cond
                    result = run_pass(clients[:n], bucket, pass_slots[slot], mode, filtered, args.limit)
                    slot += 1
                    result.update({"pass": rep, "condition": list(cond)})
                    passes.append(result)
                    s = result["summary"]
                    common.log(
                        f"[{rep}/{args.repeat}] {mode:7s} filters={'yes' if filtered else 'no ':3s} clients={n}: "
                        + (f"p50 {s['p50']:.1f} p95 {s['p95']:.1f} p99 {s['p99']:.1f} ms" if s.get("count") else "-")
                        + (f", {len(result['errors'])} errors" if result["errors"] else "")
                    )
            probe = explain_probe(clients[0], bucket, probe_queries, args.limit) if args.probe else {}
        finally:
            for c in clients:
                c.close()
        embed = None
        embedded = [s for s, c in zip(pass_slots, conds * args.repeat, strict=True) if c[0] in ("vector", "hybrid")]
        texts = [q["query"] for s in embedded for q in s]
        if texts:
            if target.private is not None:
                env, _ = inproc.child_env(private_env=target.private.env())
            else:
                env, _ = inproc.child_env(home=target.home)
            common.log(f"in-process embed_query on {len(texts)} query texts")
            embed = inproc.run_task("embed-queries", {"texts": texts}, env)
        used = [q for s in pass_slots for q in s]
        report = build_report(
            {
                "args": args, "passes": passes, "conditions": conds, "load": load, "query_info": query_info,
                "graph": graph, "embed": embed, "probe": probe, "machine": machine, "command": command,
                "target": target.describe(), "filter_mix": loader.describe_filters(used), "notes": notes,
            }
        )  # fmt: skip
    header = common.report_header(__file__, headline(passes, args), series=common.size_label(args.rows), info=machine,
                                  command=command)  # fmt: skip
    common.write_report(report, out, header=header)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
