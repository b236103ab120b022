"""HNSW recall@10 against exact search at several ``hnsw.ef_search`` values, with latency, in SQL.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/hnsw_recall.py --rows 10000 --repeat 3

The corpus is loaded over HTTP into one bucket exactly as for ``search_latency.py`` (same tenant
and bucket, so one kept ``--home`` serves both; see ``bench/loader.py``). Then this script talks
to the server's database directly (psycopg, the connection parameters Django uses, client-side
parameter binding like Django's) and runs the vector query of ``memories/retrieval/vector.py``
``nearest`` verbatim:

* **approximate**: in a transaction, ``set_config('hnsw.ef_search', ef, true)`` and
  ``set_config('hnsw.iterative_scan', 'relaxed_order', true)``, then
  ``SELECT id, 1 - (col <=> q) FROM memories m WHERE m.tenant_id = .. AND m.bucket_id = .. [AND
  filters] AND col IS NOT NULL ORDER BY col::halfvec(384) <=> q::halfvec(384) LIMIT k`` — which
  the planner answers with the HNSW index over the half-precision copies (checked with EXPLAIN;
  the plan is in the report) — and, like the server, ranks the rows it returns by their
  full-precision similarity. ``--walk full`` orders by ``col <=> q`` instead: for comparing
  against a full-precision HNSW index built by hand on the same rows (any index whose name
  ends in ``hnsw``; the server's own indexes cannot answer that order);
* **exact**: the same rows through a ``MATERIALIZED`` CTE (the server's own exact path), which
  the index cannot serve.

recall@k = |approximate top k ∩ exact top k| / |exact top k|, averaged over the query vectors
(``--queries`` generated questions about the loaded rows, embedded with
``engram_site.providers.embedding.embed_query`` in a child process). "top-k in candidates" is what the
server actually asks for: ``LIMIT candidates`` (100) at ``ef_search = max(ef, candidates)``, and
the share of the exact top k found in that candidate list. Both vector columns (``embedding``,
``context_embedding``) are measured, without and with the per-query filters of
``search_latency.py``. Latency is per SQL statement, client side, medians over ``--repeat``
passes; with ``--clients N`` the approximate query also runs from N connections at once.
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path
from typing import Any

import common
import inproc
import loader

# What nearest sets for its transaction before the index walk.
SET_LOCAL = "SELECT set_config('hnsw.ef_search', %s, true), set_config('hnsw.iterative_scan', 'relaxed_order', true)"
INDEXES = {"embedding": "idx_memories_embedding_hnsw", "context_embedding": "idx_memories_context_hnsw"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=10_000, help="memories in the bucket (default 10000)")
    p.add_argument("--repeat", type=int, default=3, help="latency passes (recall is deterministic per pass)")
    p.add_argument("--clients", type=int, default=1, help="also measure the approximate query from N connections")
    p.add_argument("--queries", type=int, default=200, help="query vectors (default 200)")
    p.add_argument("--ef", default="40,64,100,200,400", help="hnsw.ef_search values")
    p.add_argument("--k", type=int, default=10, help="recall@k (default 10)")
    p.add_argument("--candidates", type=int, default=100, help="the server's candidate count (LIMIT); 0: skip")
    p.add_argument("--columns", default="embedding,context_embedding")
    p.add_argument("--no-filtered", action="store_true", help="skip the filtered measurement")
    p.add_argument(
        "--walk", choices=sorted(WALK_ORDER), default="half",
        help="order the walk by the half-precision distance (the server's indexes) or the full one",
    )  # fmt: skip
    loader.add_load_arguments(p)
    p.add_argument("--out", type=Path, help="report path (default bench/results/hnsw-recall-<date>.md)")
    common.add_server_args(p)
    args = p.parse_args(argv)
    args.ef = [int(x) for x in args.ef.split(",") if x.strip()]
    args.columns = [c.strip() for c in args.columns.split(",") if c.strip()]
    if not set(args.columns) <= set(INDEXES):
        p.error(f"columns are {', '.join(INDEXES)}")
    if min(args.rows, args.repeat, args.clients, args.queries, args.k) < 1:
        p.error("--rows, --repeat, --clients, --queries and --k must be positive")
    global WALK
    WALK = args.walk
    return args


# --------------------------------------------------------------------------------------------
# SQL (mirrors memories/filters.py: MemoryFilters.sql and memories/retrieval/vector.py: nearest)
# --------------------------------------------------------------------------------------------


def where_sql(tenant_id: Any, bucket_id: str, filters: dict | None) -> tuple[str, list]:
    clauses, params = ["m.tenant_id = %s", "m.bucket_id = %s"], [tenant_id, bucket_id]
    filters = filters or {}
    if filters.get("hint_tags"):
        clauses.append("m.hint_tags @> %s::text[]")
        params.append(list(filters["hint_tags"]))
    for name in ("agent_id", "run_id", "attributed_to", "classified_scope", "classified_topic"):
        if filters.get(name) is not None:
            clauses.append(f"m.{name} = %s")
            params.append(filters[name])
    if filters.get("created_after"):
        clauses.append("m.created_at >= %s")
        params.append(filters["created_after"])
    if filters.get("created_before"):
        clauses.append("m.created_at < %s")
        params.append(filters["created_before"])
    return " AND ".join(clauses), params


def to_pgvector(vector: list[float]) -> str:
    """A vector in pgvector's text input format (the server binds vectors in binary instead)."""
    return "[" + ",".join(f"{x:.7g}" for x in vector) + "]"


WALK_ORDER = {
    # memories.models.half_precision_distance: what the server's HNSW indexes hold.
    "half": "(m.{column})::halfvec(384) <=> (%s)::halfvec(384)",
    "full": "m.{column} <=> %s::vector",
}
WALK = "half"  # --walk


def approx_sql(column: str, where: str) -> str:
    order = WALK_ORDER[WALK].format(column=column)
    return (
        f"SELECT m.id, 1 - (m.{column} <=> %s::vector) AS similarity FROM memories m "
        f"WHERE {where} AND m.{column} IS NOT NULL ORDER BY {order} LIMIT %s"
    )


def exact_sql(column: str, where: str) -> str:
    return (
        f"WITH b AS MATERIALIZED (SELECT m.id, m.{column} AS v FROM memories m WHERE {where} AND m.{column} "
        "IS NOT NULL) SELECT id, 1 - (v <=> %s::vector) AS similarity FROM b ORDER BY v <=> %s::vector LIMIT %s"
    )


class Probe:
    """One connection; times single statements."""

    def __init__(self, params: dict):
        import psycopg

        self.conn = psycopg.connect(**params, autocommit=True, cursor_factory=psycopg.ClientCursor)

    def close(self) -> None:
        self.conn.close()

    def approx(self, column: str, where: str, wparams: list, vec: str, limit: int, ef: int) -> tuple[list, float]:
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.execute(SET_LOCAL, [str(ef)])
            started = time.perf_counter()
            cur.execute(approx_sql(column, where), [vec, *wparams, vec, limit])
            rows = cur.fetchall()
            elapsed = time.perf_counter() - started
            # Like the server: the walk's rows (relaxed order) ranked by full-precision similarity.
            return [r[0] for r in sorted(rows, key=lambda r: r[1], reverse=True)], elapsed

    def exact(self, column: str, where: str, wparams: list, vec: str, limit: int) -> tuple[list, float]:
        with self.conn.cursor() as cur:
            started = time.perf_counter()
            cur.execute(exact_sql(column, where), [*wparams, vec, vec, limit])
            rows = cur.fetchall()
            return [r[0] for r in rows], time.perf_counter() - started

    def explain(self, column: str, where: str, wparams: list, vec: str, limit: int, ef: int) -> str:
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.execute(SET_LOCAL, [str(ef)])
            cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + approx_sql(column, where), [vec, *wparams, vec, limit])
            return "\n".join(r[0] for r in cur.fetchall())


def recall(approx: list, exact: list, k: int) -> float:
    truth = set(exact[:k])
    return len(truth & set(approx)) / len(truth) if truth else 1.0


# --------------------------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------------------------


def measure(
    probe: Probe, args, tenant_id, bucket_id, queries: list[dict], vectors: list[str], column: str, filtered: bool
) -> dict:
    k = args.k
    wheres = [where_sql(tenant_id, bucket_id, q["filters"] if filtered else None) for q in queries]
    exact_ids, exact_ms = [], []
    for rep in range(args.repeat):
        ms = []
        for (where, wparams), vec in zip(wheres, vectors, strict=True):
            ids, seconds = probe.exact(column, where, wparams, vec, k)
            ms.append(seconds)
            if rep == 0:
                exact_ids.append(ids)
        exact_ms.append(common.latency_summary(ms))
    matching = []  # rows each query may return (the filtered set)
    with probe.conn.cursor() as cur:
        for where, wparams in wheres:
            cur.execute(f"SELECT count(*) FROM memories m WHERE {where} AND m.{column} IS NOT NULL", wparams)
            matching.append(cur.fetchone()[0])
    settings = [(ef, k) for ef in args.ef]
    if args.candidates:
        settings += [(ef, args.candidates) for ef in sorted({max(ef, args.candidates) for ef in args.ef})]
    rows = []
    for ef, limit in settings:
        passes, recalls, short = [], [], 0
        for rep in range(args.repeat):
            ms = []
            for i, ((where, wparams), vec) in enumerate(zip(wheres, vectors, strict=True)):
                ids, seconds = probe.approx(column, where, wparams, vec, limit, ef)
                ms.append(seconds)
                if rep == 0:
                    recalls.append(recall(ids, exact_ids[i], k))
                    if len(ids) < min(limit, matching[i]):
                        short += 1
            passes.append(common.latency_summary(ms))
        rows.append(
            {
                "ef": ef,
                "limit": limit,
                "recall": sum(recalls) / len(recalls),
                "recall_min": min(recalls),
                "perfect": sum(1 for r in recalls if r == 1.0),
                "short": short,
                "passes": passes,
            }
        )
        common.log(
            f"  {column} {'filtered' if filtered else 'unfiltered'} ef={ef} limit={limit}: "
            f"recall@{k} {rows[-1]['recall']:.3f}, p50 {common.median([p['p50'] for p in passes]):.2f} ms"
        )
    small = sum(1 for ids in exact_ids if len(ids) < k)
    plan = probe.explain(column, *wheres[0], vectors[0], k, 100)
    return {
        "column": column,
        "filtered": filtered,
        "exact": exact_ms,
        "rows": rows,
        "plan": plan,
        "uses_index": re.search(r"Index Scan using \w*hnsw\b", plan) is not None,
        "exact_short": small,
    }


def concurrent(params: dict, args, tenant_id, bucket_id, vectors: list[str], column: str) -> list[dict]:
    """The unfiltered approximate query from ``args.clients`` connections at once, per ef."""
    where, wparams = where_sql(tenant_id, bucket_id, None)
    out = []
    for ef in args.ef:
        passes = []
        for _ in range(args.repeat):
            probes = [Probe(params) for _ in range(args.clients)]
            lat: list[list[float]] = [[] for _ in probes]

            def worker(i: int, go, probes=probes, lat=lat, ef=ef) -> None:
                go()
                for vec in vectors[i :: len(probes)]:
                    lat[i].append(probes[i].approx(column, where, wparams, vec, args.k, ef)[1])

            wall = common.run_together(worker, len(probes), "probe")
            for p in probes:
                p.close()
            flat = [x for per in lat for x in per]
            passes.append({**common.latency_summary(flat), "qps": len(flat) / wall})
        out.append({"ef": ef, "passes": passes})
    return out


def database_info(probe: Probe, bucket_id: str) -> dict:
    with probe.conn.cursor() as cur:
        cur.execute("SHOW server_version")
        version = cur.fetchone()[0]
        cur.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        pgvector = (cur.fetchone() or ["?"])[0]
        cur.execute(
            "SELECT indexname, indexdef, pg_size_pretty(pg_relation_size(indexname::regclass)) FROM pg_indexes "
            "WHERE tablename = 'memories' AND indexdef ILIKE '%hnsw%' ORDER BY indexname"
        )
        indexes = cur.fetchall()
        cur.execute(
            "SELECT count(*), count(embedding), count(context_embedding), "
            "count(*) FILTER (WHERE bucket_id = %s) FROM memories",
            [bucket_id],
        )
        total, embedded, context_embedded, in_bucket = cur.fetchone()
        cur.execute("SHOW hnsw.max_scan_tuples")
        max_scan = cur.fetchone()[0]
    return {
        "version": version,
        "pgvector": pgvector,
        "indexes": indexes,
        "rows_total": total,
        "embedded": embedded,
        "context_embedded": context_embedded,
        "rows_bucket": in_bucket,
        "max_scan_tuples": max_scan,
    }


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def _short_plan(plan: str) -> str:
    plan = re.sub(r"'\[[-+0-9.e,]+\]'", "'[…384 numbers…]'", plan)
    keep = [line for line in plan.splitlines() if not re.match(r"\s*(Planning|Execution) Time", line)]
    return "\n".join(keep[:25])


def build_report(ctx: dict) -> str:
    args, info, results = ctx["args"], ctx["db"], ctx["results"]
    lines = [
        "# HNSW recall against exact search",
        "",
        common.machine_markdown(ctx["machine"]),
        f"- server: {ctx['target']}; PostgreSQL {info['version']}, pgvector {info['pgvector']}, "
        f"hnsw.max_scan_tuples {info['max_scan_tuples']}",
        f"- data: first {args.rows} rows of `{args.corpus.name}` in one bucket ({info['rows_bucket']} rows; the table "
        f"holds {info['rows_total']}: {info['embedded']} embeddings, {info['context_embedded']} context embeddings); "
        f"{ctx['load'].describe()}",
        f"- query vectors: {len(ctx['queries'])} generated questions ({ctx['about']} about loaded rows), embedded "
        "with `engram_site.providers.embedding.embed_query`; filtered runs use each query's filters: "
        + loader.describe_filters(ctx["queries"]),
        f"- latency passes: {args.repeat}; recall from the first pass; `ANALYZE memories` before measuring",
        "",
        "```",
        ctx["command"],
        "```",
        "",
    ]
    for idx in info["indexes"]:
        lines.append(f"- `{idx[1]}` ({idx[2]})")
    lines.append("")
    for res in results:
        title = f"`{res['column']}`, {'with filters' if res['filtered'] else 'no filters'}"
        lines += [f"## {title}", ""]
        exact = res["exact"]
        lines += [
            f"Exact (materialized CTE, sequential): p50 {common.median([p['p50'] for p in exact]):.2f} ms, "
            f"p95 {common.median([p['p95'] for p in exact]):.2f} ms."
            + (f" {res['exact_short']} queries have fewer than {args.k} matching rows." if res["exact_short"] else ""),
            "",
        ]
        headers = ["ef_search", "LIMIT", f"recall@{args.k}", "min", "perfect", "short", "p50 ms", "p95 ms", "p99 ms"]
        table = []
        for r in res["rows"]:
            p = r["passes"]
            table.append(
                [
                    r["ef"],
                    r["limit"],
                    f"{r['recall']:.4f}",
                    f"{r['recall_min']:.2f}",
                    f"{r['perfect']}/{len(ctx['queries'])}",
                    r["short"],
                    f"{common.median([x['p50'] for x in p]):.2f}",
                    f"{common.median([x['p95'] for x in p]):.2f}",
                    f"{common.median([x['p99'] for x in p]):.2f}",
                ]
            )
        lines += [common.markdown_table(headers, table), ""]
        verdict = "uses" if res["uses_index"] else "**does not use**"
        lines += [
            f"EXPLAIN (ef_search 100, LIMIT {args.k}, first query, {WALK}-precision walk) {verdict} an HNSW index:",
            "",
            "```",
            _short_plan(res["plan"]),
            "```",
            "",
        ]
    lines += [
        f"`recall@{args.k}` with `LIMIT {args.k}`: the exact top {args.k} found by the index walk. With `LIMIT "
        f"{args.candidates}` (the server's candidate list, at ef_search = max(ef, {args.candidates})): the share of "
        f"the exact top {args.k} that is among the candidates fusion sees. `perfect`: queries with recall 1; "
        "`short`: queries for which the index walk returned fewer rows than asked (the server then re-runs the "
        "query exactly).",
        "",
    ]
    if ctx["concurrent"]:
        lines += [f"## {args.clients} connections at once (`embedding`, no filters, LIMIT {args.k})", ""]
        table = [
            [
                c["ef"],
                f"{common.median([p['p50'] for p in c['passes']]):.2f}",
                f"{common.median([p['p95'] for p in c['passes']]):.2f}",
                f"{common.median([p['qps'] for p in c['passes']]):.0f}",
            ]
            for c in ctx["concurrent"]
        ]
        lines += [common.markdown_table(["ef_search", "p50 ms", "p95 ms", "queries/s"], table), ""]
    lines += ["## Raw passes", ""]
    table = []
    for res in results:
        name = f"{res['column']}{' filtered' if res['filtered'] else ''}"
        table.append([name, "exact", "", *[f"{p['p50']:.2f}/{p['p95']:.2f}" for p in res["exact"]]])
        for r in res["rows"]:
            table.append([name, r["ef"], r["limit"], *[f"{p['p50']:.2f}/{p['p95']:.2f}" for p in r["passes"]]])
    headers = ["column", "ef_search", "LIMIT", *[f"pass {i + 1} p50/p95 ms" for i in range(args.repeat)]]
    lines += [common.markdown_table(headers, table, "lrr" + "r" * args.repeat), ""]
    if ctx["notes"]:
        lines += ["## Notes", "", *[f"- {n}" for n in ctx["notes"]], ""]
    return "\n".join(lines)


def headline(results: list[dict], args: argparse.Namespace) -> str:
    """Recall@k of the first column, unfiltered, at each ef_search with LIMIT k, and the walk's p50."""
    first = next((r for r in results if not r["filtered"]), results[0] if results else None)
    if first is None:
        return "nothing measured"
    parts = [
        f"{row['recall']:.3f} at {row['ef']} ({common.median([p['p50'] for p in row['passes']]):.2f} ms)"
        for row in first["rows"]
        if row["limit"] == args.k
    ]
    return f"recall@{args.k} of {first['column']} by ef_search (walk p50): " + ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    machine, command = common.machine_info(), common.command_line()
    out = args.out or common.default_report_path("hnsw-recall")
    pool, qinfo = loader.query_pool(args.corpus, args.rows)
    queries = loader.deal(pool, 1, args.queries)[0]
    notes: list[str] = []
    with common.server_from_args(args, tenant=loader.TENANT) as target:
        if target.private is not None:
            env, where = inproc.child_env(private_env=target.private.env())
        else:
            env, where = inproc.child_env(home=target.home)
        if where == "none":
            raise SystemExit("hnsw_recall needs the server's database: use a private server, --home or DATABASE_URL")
        load = loader.load(target, args)
        common.log(load.describe())
        params = inproc.run_task("dsn", {}, env)
        common.log(f"embedding {len(queries)} query texts in-process")
        embedded = inproc.run_task(
            "embed-queries", {"texts": [q["query"] for q in queries], "return_vectors": True}, env
        )
        vectors = [to_pgvector(v) for v in embedded["vectors"]]
        probe = Probe(params)
        try:
            with probe.conn.cursor() as cur:
                cur.execute("SELECT tenant_id FROM memories WHERE bucket_id = %s LIMIT 1", [load.bucket_id])
                tenant_id = cur.fetchone()[0]
                cur.execute("ANALYZE memories")
            info = database_info(probe, load.bucket_id)
            results = []
            for filtered in (False, True) if not args.no_filtered else (False,):
                for column in args.columns:
                    common.log(f"{column}, {'filtered' if filtered else 'unfiltered'}: exact, then ef {args.ef}")
                    results.append(measure(probe, args, tenant_id, load.bucket_id, queries, vectors, column, filtered))
        finally:
            probe.close()
        conc = []
        if args.clients > 1:
            common.log(f"{args.clients} connections at once")
            conc = concurrent(params, args, tenant_id, load.bucket_id, vectors, "embedding")
        if any(not r["uses_index"] for r in results):
            notes.append("At least one EXPLAIN did not use the HNSW index: the planner preferred another plan.")
        report = build_report(
            {
                "args": args, "db": info, "results": results, "concurrent": conc, "machine": machine,
                "command": command, "target": target.describe(), "load": load, "queries": queries,
                "about": min(qinfo["about_loaded"], len(queries)), "notes": notes,
            }
        )  # fmt: skip
    header = common.report_header(__file__, headline(results, args), series=common.size_label(args.rows), info=machine,
                                  command=command)  # fmt: skip
    common.write_report(report, out, header=header)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
