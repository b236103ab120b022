"""Ingest throughput through HTTP, the share of embedding / lemmatizing / database, and the ceiling.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/ingest_throughput.py --rows 10000 --repeat 3

Four parts, one run, one machine:

1. **HTTP** (a private server, or ``--base-url``/``--token``): the first ``--rows`` rows of the
   corpus are written in batches of each ``--batch-sizes`` (``{"memories": [...]}``, with
   ``"sequence": true`` — the API default — and ``false``), and as single memory objects
   (``--single-rows`` of them); batch size 1 also uses ``--single-rows``. Every run writes into
   fresh buckets (one per client, ``--clients`` writing at once, each its own contiguous slice)
   that are deleted afterwards, and the table is vacuumed when the database is reachable, so
   every run starts from the same index. Items/s = rows / wall time; median over ``--repeat``
   runs, interleaved (each repetition runs every configuration once). After the first run of a
   configuration the memories are listed back to count what the server computed: every row gets
   an embedding, and a row that has a ``context`` (its one or two predecessors in its sequence:
   same ``run_id`` across requests, or the batch without a run) gets a second one.
2. **Stage split** (in-process, ``bench/inproc.py``): ``memories.services.memories_ingest`` — what
   the endpoint calls — on the first ``--split-rows`` rows with each configuration, with timers
   around ``embed_texts``, ``count_tokens``, ``lemmatize_many``, every SQL statement and commit,
   and the post-commit queue hints, on the server's own database. The server is not modified.
   The difference between the HTTP time per item and the in-process time per item is what HTTP,
   authentication, validation and serialisation cost.
3. **Ceiling**: ``engram_site.providers.embedding.embed_texts`` alone (batches of 64, calls of 1,000 texts) on
   the memory texts of the first ``--split-rows`` rows and on their context texts
   (``predecessors + "\\n" + content``, derived like ``memories.services`` does and checked against
   what the stage split recorded), in a child process before the HTTP runs and again after them
   (all repetitions pooled; both medians are shown, so drift is visible): sentences/s of the
   model. The ceiling of a configuration in items/s is
   ``1 / (content embeddings per item / content rate + context embeddings per item / context rate)``
   with the per-item counts the server actually produced; the report gives HTTP items/s as a % of it.
4. **CPU**: the stage split's runs and the ceiling's also record CPU seconds — of the child process
   and of every process of the database server (``/proc``; only for a server on this machine) — so
   the report can say what the cores did and the *bound*: the rate no schedule of the same work can
   pass, ``cores / (model-alone CPU + database CPU)`` per item, capped at the ceiling.

Long runs are resumable with a kept home: ``--home DIR`` (or ``--state FILE``) records every
finished run, and a rerun with the same arguments skips them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import common
import inproc
import loader


@dataclass(frozen=True)
class Config:
    label: str
    batch_size: int
    sequence: bool
    single: bool
    rows: int

    def describe(self) -> str:
        if self.single:
            return "single writes (memory object, sequence by run_id)"
        return f"batch {self.batch_size}, sequence={'true' if self.sequence else 'false'}"


PRELOAD_BUCKET = "ingest-preload"


def build_configs(args: argparse.Namespace) -> list[Config]:
    configs: list[Config] = []
    if args.single_rows:
        configs.append(Config("single", 1, True, True, args.single_rows))
    sequences = {"both": [True, False], "true": [True], "false": [False]}[args.sequence]
    for size in args.batch_sizes:
        for seq in sequences:
            rows = args.single_rows if size < 10 else args.rows
            if rows:
                configs.append(Config(f"b{size}-{'seq' if seq else 'noseq'}", size, seq, False, rows))
    return configs


# --------------------------------------------------------------------------------------------
# Database access (vacuum between runs), when the server's database is reachable
# --------------------------------------------------------------------------------------------


class Database:
    def __init__(self, params: dict | None):
        self.params = params

    @property
    def available(self) -> bool:
        return self.params is not None

    def vacuum(self) -> float:
        if not self.params:
            return 0.0
        import psycopg

        started = time.perf_counter()
        with psycopg.connect(**self.params, autocommit=True) as conn:
            conn.execute("VACUUM (ANALYZE) memories")
        return time.perf_counter() - started

    def table_rows(self) -> int | None:
        if not self.params:
            return None
        import psycopg

        with psycopg.connect(**self.params) as conn:
            return conn.execute("SELECT count(*) FROM memories").fetchone()[0]


# --------------------------------------------------------------------------------------------
# HTTP runs
# --------------------------------------------------------------------------------------------


def _slices(rows: list[dict], parts: int) -> list[list[dict]]:
    size = -(-len(rows) // parts)
    return [rows[i : i + size] for i in range(0, len(rows), size)]


def http_run(target: common.Target, cfg: Config, rows: list[dict], clients: int, tag: str) -> dict:
    slices = _slices(rows[: cfg.rows], clients)
    with target.client() as c:
        buckets = [c.create_bucket(f"ingest-{cfg.label}-{tag}-c{i}") for i in range(len(slices))]
    latencies: list[list[float]] = [[] for _ in slices]
    deduplicated = [0] * len(slices)
    errors: list[BaseException] = []

    def worker(i: int, go) -> None:
        with target.client(timeout=900) as client:
            path = f"/api/v1/buckets/{buckets[i]}/memories"
            mine = slices[i]
            go()
            try:
                for lo in range(0, len(mine), cfg.batch_size):
                    batch = mine[lo : lo + cfg.batch_size]
                    if cfg.single:
                        resp = client.request("POST", path, batch[0], expect=201)
                    else:
                        resp = client.ingest(buckets[i], batch, sequence=cfg.sequence)
                    latencies[i].append(resp.elapsed)
                    results = resp.data["results"]
                    if len(results) != len(batch):
                        raise RuntimeError(f"{len(results)} results for {len(batch)} memories")
                    deduplicated[i] += sum(1 for r in results if r["deduplicated"])
            except BaseException as exc:
                errors.append(exc)

    seconds = common.run_together(worker, len(slices), "ingest")
    if errors:
        raise RuntimeError(f"{cfg.label}: ingest failed") from errors[0]
    flat = [x for per in latencies for x in per]
    return {
        "config": cfg.label,
        "items": cfg.rows,
        "clients": len(slices),
        "seconds": seconds,
        "items_per_s": cfg.rows / seconds,
        "requests": len(flat),
        "latency": common.latency_summary(flat),
        "deduplicated": sum(deduplicated),
        "buckets": buckets,
    }


def count_enrichment(client: common.BenchClient, bucket_ids: list[str]) -> dict:
    """What the server computed for the stored rows: embeddings, context embeddings, pending."""
    counts = {"rows": 0, "embedding": 0, "context": 0, "context_pending": 0, "lemmas": 0, "pending": 0}
    for bucket_id in bucket_ids:
        for m in client.engram.list_memories(bucket_id, page_size=500):
            e = m.enrichment
            counts["rows"] += 1
            counts["embedding"] += e["embedding"] == "ready"
            counts["lemmas"] += e["lemmas"] == "ready"
            counts["context"] += e["context"] == "ready"
            counts["context_pending"] += e["context"] == "pending"
            counts["pending"] += "pending" in e.values()
    return counts


def warm_up(target: common.Target, rows: list[dict], threads: int) -> None:
    """Load the models in every gunicorn worker and touch every code path once."""
    with target.client() as c:
        bucket = c.create_bucket(f"ingest-warmup-{int(time.time())}")

    def worker(i: int) -> None:
        mine = rows[i::threads]
        with target.client(timeout=900) as client:
            for lo in range(0, len(mine) - 10, 100):
                client.ingest(bucket, mine[lo : lo + 100])
            for row in mine[-10:]:
                client.request("POST", f"/api/v1/buckets/{bucket}/memories", row, expect=201)

    started = time.perf_counter()
    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    with target.client() as c:
        c.delete_bucket(bucket)
    common.log(f"warm-up: {len(rows)} rows from {threads} connections in {time.perf_counter() - started:.1f}s")


# --------------------------------------------------------------------------------------------
# Resumable state
# --------------------------------------------------------------------------------------------


class State:
    def __init__(self, path: Path | None, signature: dict):
        self.path = path
        self.signature = signature
        self.runs: dict[str, dict] = {}
        if path and path.exists():
            saved = json.loads(path.read_text())
            if saved.get("signature") == signature:
                self.runs = saved["runs"]
                common.log(f"resuming: {len(self.runs)} finished run(s) in {path}")
            else:
                common.log(f"{path} is from other arguments; starting over")

    def save(self) -> None:
        if self.path:
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"signature": self.signature, "runs": self.runs}))
            tmp.replace(self.path)


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def _rate(texts: int, seconds: list[float]) -> float:
    return texts / common.median(seconds) if seconds else float("nan")


def _embeddings_per_item(cfg: Config, verified: dict, split: dict | None) -> tuple[float, float] | None:
    """(memory, context) embeddings the server computed per item of ``cfg``: counted on the stored
    rows, or failing that from the in-process run's calls."""
    ver = verified.get(cfg.label)
    if ver and ver["rows"]:
        return ver["embedding"] / ver["rows"], ver["context"] / ver["rows"]
    s = next((r for r in split["runs"] if r["label"].startswith(cfg.label + "#")), None) if split else None
    if s:
        return (s["embedded_texts"] - s["context_texts"]) / s["items"], s["context_texts"] / s["items"]
    return None


def _model_alone(ceiling: dict, per_item: tuple[float, float], key: str) -> float:
    """Seconds (``key`` "seconds") or CPU seconds ("cpu") the model alone takes for one item's
    embeddings, from the ceiling runs' medians; nan when they were not measured."""
    total = 0.0
    for kind, count in zip(("content", "context"), per_item, strict=True):
        if count:
            measured = ceiling["embed"].get(kind, {})
            values = measured.get(key) or []
            total += count * common.median(values) / measured["texts"] if values else float("nan")
    return total


def _per_1000(runs: list[dict], value: Callable[[dict], float | None]) -> float:
    """The median over ``runs`` of ``value(run)`` per 1000 items of the run (None: unknown, left out)."""
    known = [v / r["items"] * 1000 for r in runs if (v := value(r)) is not None]
    return common.median(known) if known else float("nan")


def _cpu_section(configs: list[Config], verified: dict, split: dict, ceiling: dict) -> list[str]:
    """What the cores did during the in-process runs, and the rate no schedule of that work can pass."""
    cores = ceiling.get("cores")
    headers = [
        "configuration", "wall s", "process core-s", "database core-s", "cores busy",
        "model alone s", "model alone core-s", "bound items/s", "bound % of ceiling", "in-process % of ceiling",
    ]  # fmt: skip
    table = []
    for cfg in configs:
        mine = [r for r in split["runs"] if r["label"].startswith(cfg.label + "#") and r.get("cpu")]
        per_item = _embeddings_per_item(cfg, verified, split)
        if not mine or per_item is None or not cores:
            continue
        wall = _per_1000(mine, lambda r: r["seconds"])
        process = _per_1000(mine, lambda r: r["cpu"]["process"])
        database = _per_1000(mine, lambda r: r["cpu"]["database"])
        model_wall = 1000 * _model_alone(ceiling, per_item, "seconds")
        model_cpu = 1000 * _model_alone(ceiling, per_item, "cpu")
        best_wall = max(model_wall, (model_cpu + database) / cores)
        table.append(
            [
                cfg.describe(), f"{wall:.2f}", f"{process:.2f}", f"{database:.2f}",
                f"{(process + database) / wall:.2f}", f"{model_wall:.2f}", f"{model_cpu:.2f}",
                f"{1000 / best_wall:.1f}", f"{100 * model_wall / best_wall:.0f}%", f"{100 * model_wall / wall:.0f}%",
            ]
        )  # fmt: skip
    if not table:
        return []
    return [
        f"## CPU per 1000 items: what {cores} cores allow (in-process, medians)",
        "",
        common.markdown_table(headers, table),
        "",
        "Per 1000 items of the in-process `memories_ingest` runs: wall seconds; CPU seconds of that process (the "
        "model's threads and the Python around them) and of the database server (all of its processes: the "
        "backend's inserts and index upkeep, WAL writing, autovacuum; n/a for a server on another machine); "
        "cores busy = both CPU figures over the wall time. Model alone = the ceiling runs' wall and CPU time for "
        "the same embeddings. The bound is the rate no schedule of this work can pass on these cores: the model "
        "alone's CPU plus the database's, spread over every core without loss (nothing else costing anything), "
        "and never faster than the model alone. A bound under 100% of the ceiling is the database's share of "
        "the machine; what separates the in-process rate from the bound is the model slowing beside the "
        "database and the Python around them.",
        "",
    ]


def build_report(ctx: dict[str, Any]) -> str:
    args, configs = ctx["args"], ctx["configs"]
    runs, verified, split, ceiling = ctx["runs"], ctx["verified"], ctx["split"], ctx["ceiling"]
    lines = [
        "# Ingest throughput",
        "",
        common.machine_markdown(ctx["machine"]),
        f"- server: {ctx['target']}",
        f"- corpus: `{args.corpus}` (first rows; contents 8-40 words, every row has a `run_id`)",
        f"- rows per run: {args.rows} for batch sizes >= 10, {args.single_rows} for single writes and batch"
        f" sizes < 10; {args.clients} client(s) writing at once (own bucket each); {args.repeat} repetitions",
        "- between runs: buckets deleted"
        + (", `VACUUM (ANALYZE) memories`" if ctx["db"] else " (no vacuum: no database access)"),
        "- memories already in the table (the HNSW graph each insert joins): "
        + (f"{ctx['table_rows']:,}" if ctx["table_rows"] is not None else "unknown (no database access)")
        + (
            f", {p.rows:,} of them preloaded (`--preload`: corpus rows {ctx['preload_from']:,} onwards, "
            "written without context into a bucket of their own)"
            if (p := ctx["preloaded"])
            else ""
        ),
        f"- in-process measurements (bench/inproc.py, database: {ctx['inproc_db']}): "
        + (
            f"stage split on the first {args.split_rows} rows (single/batch<10: "
            f"{min(args.split_rows, args.single_rows)}), "
            if ctx["split"]
            else "no stage split, "
        )
        + f"model ceiling on the texts of the first {args.split_rows} rows",
        "",
        "```",
        ctx["command"],
        "```",
        "",
    ]
    lines += ["## Throughput through HTTP (medians)", ""]
    headers = [
        "configuration", "rows", "items/s", "min–max", "request p50 ms", "request p95 ms",
        "embeddings/item", "ceiling items/s", "% of ceiling",
    ]  # fmt: skip
    table = []
    for cfg in configs:
        mine = [r for r in runs if r["config"] == cfg.label]
        if not mine:
            continue
        ips = [r["items_per_s"] for r in mine]
        per_item = _embeddings_per_item(cfg, verified, split)
        ceiling_ips = pct = "n/a"
        emb_item = "n/a"
        if per_item is not None:
            emb_item = f"{sum(per_item):.2f}"
            cost = _model_alone(ceiling, per_item, "seconds") if ceiling else float("nan")
            if cost == cost and cost > 0:  # not nan
                ceiling_ips = 1.0 / cost
                pct = f"{100.0 * common.median(ips) / ceiling_ips:.0f}%"
                ceiling_ips = f"{ceiling_ips:.1f}"
        table.append(
            [
                cfg.describe(),
                cfg.rows,
                f"{common.median(ips):.1f}",
                f"{min(ips):.1f}–{max(ips):.1f}",
                f"{common.median([r['latency']['p50'] for r in mine]):.1f}",
                f"{common.median([r['latency']['p95'] for r in mine]):.1f}",
                emb_item,
                ceiling_ips,
                pct,
            ]
        )
    lines += [common.markdown_table(headers, table, "l" + "r" * (len(headers) - 1)), ""]
    lines += [
        "`embeddings/item` is counted on the stored rows after the first run (every row is embedded; rows with "
        "a sequence `context` are embedded a second time with their predecessors). `sequence=false` writes "
        "unrelated facts: no context, one embedding per memory, and no context search for them later. "
        "Single writes and batches of 1 still get context through `run_id` (a database lookup of the run's "
        "previous memories), so they need ~2 embeddings each, computed two texts at a time.",
        "",
    ]
    if ceiling:
        lines += ["## The ceiling: the model alone, same texts, same machine (in-process, medians)", ""]
        rows = []
        for kind, label in (("content", "memory texts"), ("context", "context texts (predecessors + memory)")):
            if kind not in ceiling["embed"]:
                continue
            e, lm, tk = ceiling["embed"][kind], ceiling["lemmatize"][kind], ceiling["tokenize"][kind]
            rows.append(
                [
                    label,
                    e["texts"],
                    f"{e['chars'] / e['texts']:.0f}",
                    f"{_rate(e['texts'], e['seconds']):.1f}",
                    " / ".join(f"{_rate(e['texts'], p['embed'][kind]['seconds']):.1f}" for p in ceiling["parts"]),
                    f"{_rate(lm['texts'], lm['seconds']):.0f}",
                    f"{_rate(tk['texts'], tk['seconds']):.0f}",
                ]
            )
        headers = [
            "texts", "n", "avg chars", "embed_texts /s", "before / after", "lemmatize_many /s", "count_tokens /s",
        ]  # fmt: skip
        lines += [common.markdown_table(headers, rows), ""]
        lines += [
            f"`embed_texts(batch_size={ceiling['batch_size']})` on the `{ceiling.get('runtime', 'torch')}` runtime "
            f"(the server's) in calls of {ceiling['chunk']} texts, measured "
            "before and after the HTTP runs (the rate is the median of both; a large before/after gap means the "
            "machine was busy); lemmatize_many and count_tokens on the same texts for scale.",
            "",
        ]
    if split:
        lines += ["## Where the time goes (in-process `memories_ingest`, medians of the runs)", ""]
        stage_names = [*inproc.STAGES, "other (Python)", "model busy"]
        headers = ["configuration", "items", "items/s", *stage_names, "HTTP overhead*"]
        table = []
        for cfg in configs:
            mine = [r for r in split["runs"] if r["label"].startswith(cfg.label + "#")]
            if not mine:
                continue
            total = common.median([r["seconds"] for r in mine])
            per_item = total / mine[0]["items"]
            shares = []
            for stage in stage_names:
                share = common.median([r["stages"].get(stage, 0.0) / r["seconds"] for r in mine])
                shares.append(f"{100 * share:.0f}%")
            http = [r for r in runs if r["config"] == cfg.label]
            overhead = "n/a"
            if http and args.clients == 1:
                http_per_item = common.median([r["seconds"] / r["items"] for r in http])
                overhead = f"{100 * (http_per_item - per_item) / http_per_item:.0f}%"
            table.append([cfg.describe(), mine[0]["items"], f"{1 / per_item:.1f}", *shares, overhead])
        lines += [common.markdown_table(headers, table), ""]
        lines += [
            "Shares of the in-process `memories_ingest` time (exclusive, in the request's thread: embedding = "
            "waiting for the model, which runs a chunk ahead in a helper thread (chunks of up to 256 rows, the "
            "last ones halving down to 4); database = every SQL statement and commit, including the run-context "
            "lookups and the HNSW/GIN index maintenance of the insert; "
            "queue hints = publishing the post-commit enrichment and graph messages to the broker; other = "
            "Python between them; these add up to 100%). Model busy = the model's own time in its thread, "
            "overlapping the others: model busy + database above 100% is the overlap. "
            "*HTTP overhead = (HTTP seconds per item − in-process seconds per item) / "
            "HTTP seconds per item, with one client: gunicorn, authentication, JSON, DRF validation and "
            "serialisation (n/a with several clients, whose requests overlap). The two are measured at different "
            "moments: a negative value means the in-process run was slower, i.e. the machine was not quiet.",
            "",
        ]
    if split and ceiling:
        lines += _cpu_section(configs, verified, split, ceiling)
    if verified:
        lines += ["## What the server stored (first run of each configuration)", ""]
        headers = ["configuration", "rows", "embedded", "context embedded", "context pending", "any pending"]
        table = [
            [cfg.describe(), v["rows"], v["embedding"], v["context"], v["context_pending"], v["pending"]]
            for cfg in configs
            if (v := verified.get(cfg.label))
        ]
        lines += [common.markdown_table(headers, table), ""]
    lines += ["## Raw runs", ""]
    headers = ["configuration", "repetition", "rows", "seconds", "items/s", "requests", "p50 ms", "p95 ms", "max ms"]
    table = [
        [
            r["config"],
            r["repetition"],
            r["items"],
            f"{r['seconds']:.2f}",
            f"{r['items_per_s']:.1f}",
            r["requests"],
            f"{r['latency']['p50']:.1f}",
            f"{r['latency']['p95']:.1f}",
            f"{r['latency']['max']:.1f}",
        ]
        for r in sorted(runs, key=lambda r: (r["repetition"], r["config"]))
    ]
    lines += [common.markdown_table(headers, table), ""]
    if split:
        names = [*inproc.STAGES, "other (Python)", "model busy"]
        headers = ["in-process run", "items", "seconds", *[f"{s} s" for s in names]]
        table = [
            [r["label"], r["items"], f"{r['seconds']:.2f}", *[f"{r['stages'].get(n, 0.0):.2f}" for n in names]]
            for r in split["runs"]
        ]
        lines += [common.markdown_table(headers, table), ""]
    if ceiling:
        table = [
            [f"{name} {kind} ({when})", d["texts"], " ".join(f"{s:.2f}" for s in d["seconds"])]
            for when, part in zip(("before", "after"), ceiling["parts"], strict=False)
            for name in ("embed", "lemmatize", "tokenize")
            for kind, d in part[name].items()
        ]
        lines += [common.markdown_table(["ceiling run", "texts", "seconds per repetition"], table), ""]
    if ctx["notes"]:
        lines += ["## Notes", "", *[f"- {n}" for n in ctx["notes"]], ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=10_000, help="rows per run for batch sizes >= 10 (default 10000)")
    p.add_argument(
        "--single-rows", type=int, default=500, help="rows per run for single writes and batch sizes < 10 (0: skip)"
    )
    p.add_argument("--batch-sizes", default="1,100,1000", help="comma-separated (default 1,100,1000; max 1000)")
    p.add_argument("--sequence", choices=["both", "true", "false"], default="both", help="batch sequence modes")
    p.add_argument("--repeat", type=int, default=3, help="runs per configuration (medians are reported)")
    p.add_argument("--clients", type=int, default=1, help="concurrent writers, each with its own bucket")
    p.add_argument("--split-rows", type=int, default=2000, help="rows for the in-process stage split and ceiling")
    p.add_argument(
        "--no-split", action="store_true", help="skip the in-process stage split (the ceiling is always measured)"
    )
    p.add_argument("--corpus", type=Path, default=loader.DEFAULT_CORPUS)
    p.add_argument(
        "--preload",
        type=int,
        default=0,
        help="memories written into a bucket of their own before anything is measured (as unrelated facts, "
        "from the corpus rows after those the runs write): the size of the HNSW graph every insert joins",
    )
    p.add_argument("--state", type=Path, help="resume file (default: $HOME_DIR/bench-ingest-state.json with --home)")
    p.add_argument("--out", type=Path, help="report path (default bench/results/ingest-throughput-<date>.md)")
    common.add_server_args(p)
    args = p.parse_args(argv)
    args.batch_sizes = sorted({int(x) for x in args.batch_sizes.split(",") if x.strip()})
    if any(not 1 <= b <= 1000 for b in args.batch_sizes):
        p.error("batch sizes must be within 1..1000")
    if args.rows < 1 or args.repeat < 1 or args.clients < 1:
        p.error("--rows, --repeat and --clients must be positive")
    if args.preload < 0:
        p.error("--preload must be 0 or more")
    return args


def headline(configs: list[Config], runs: list[dict]) -> str:
    """Items/s through HTTP per configuration (medians of the repetitions)."""
    parts = []
    for cfg in configs:
        rates = [r["items_per_s"] for r in runs if r["config"] == cfg.label]
        if rates:
            parts.append(f"{cfg.describe()}: {common.median(rates):.1f}")
    return "items/s through HTTP, " + "; ".join(parts) if parts else "nothing measured"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    machine, command = common.machine_info(), common.command_line()
    configs = build_configs(args)
    need = max(c.rows for c in configs)
    rows = loader.read_rows(args.corpus, max(need, args.split_rows))
    warm_rows = rows[:440]  # into a scratch bucket of its own, deleted afterwards
    out = args.out or common.default_report_path("ingest-throughput")
    notes: list[str] = []
    tenant = "bench-ingest" if args.home else None
    with common.server_from_args(args, tenant=tenant) as target:
        if target.private is not None:
            env, inproc_db = inproc.child_env(private_env=target.private.env())
        else:
            env, inproc_db = inproc.child_env(home=target.home)
        db_params = None
        if inproc_db != "none":
            db_params = inproc.run_task("dsn", {}, env)
        db = Database(db_params)
        if not db.available:
            notes.append("No database access (an existing server without --home or DATABASE_URL): no vacuum "
                         "between runs and no in-process stage split.")  # fmt: skip
        state_path = args.state or (target.home / "bench-ingest-state.json" if args.home else None)
        signature = {
            "rows": args.rows, "single_rows": args.single_rows, "clients": args.clients,
            "corpus": str(args.corpus), "configs": [asdict(c) for c in configs], "preload": args.preload,
        }  # fmt: skip
        state = State(state_path, signature)
        preloaded = None
        if args.preload:
            # Rows the runs never write, so no run's text is already a neighbour of itself in the graph.
            preloaded = loader.ensure_loaded(
                target, args.corpus, args.preload, bucket_name=PRELOAD_BUCKET, sequence=False, start=len(rows)
            )
            common.log(f"preload: {preloaded.describe()}")
        db.vacuum()
        table_rows = db.table_rows()
        texts = ceiling_texts(rows, args.split_rows)
        common.log(
            f"in-process ceiling (before): {len(texts['content'])} memory + {len(texts['context'])} context texts"
        )
        ceilings = [inproc.run_task("ceiling", {"texts": texts, "repeat": args.repeat, "chunk": 1000}, env)]
        if any(f"{cfg.label}#{rep}" not in state.runs for cfg in configs for rep in range(1, args.repeat + 1)):
            warm_up(target, warm_rows, threads=max(2, args.workers))
        runs: list[dict] = []
        verified: dict[str, dict] = dict(state.runs.get("_verified", {}))
        for rep in range(1, args.repeat + 1):
            for cfg in configs:
                key = f"{cfg.label}#{rep}"
                if key in state.runs:
                    runs.append(state.runs[key])
                    continue
                common.log(f"[{rep}/{args.repeat}] {cfg.describe()}: {cfg.rows} rows, {args.clients} client(s)")
                result = http_run(target, cfg, rows, args.clients, f"r{rep}-{int(time.time())}")
                result["repetition"] = rep
                common.log(
                    f"  {result['items_per_s']:.1f} items/s ({result['seconds']:.1f}s, "
                    f"request p50 {result['latency']['p50']:.0f} ms)"
                )
                with target.client(timeout=600) as c:
                    if cfg.label not in verified:
                        verified[cfg.label] = count_enrichment(c, result["buckets"])
                        common.log(f"  stored: {verified[cfg.label]}")
                    for b in result["buckets"]:
                        c.delete_bucket(b)
                result["vacuum_seconds"] = db.vacuum()
                runs.append(result)
                state.runs[key] = result
                state.runs["_verified"] = verified
                state.save()
        split = None
        if not args.no_split and db.available:
            split = stage_split(target, env, configs, rows, args, db)
            recorded = split.pop("recorded", {}).get("context") or []
            blind = [r["label"] for r in split["runs"] if not r["embedded_texts"] or not r["lemmatized_texts"]]
            if blind:
                notes.append(
                    f"The stage timers saw no embed_texts/lemmatize_many call in {', '.join(blind)}: "
                    "memories.services no longer calls them as bench/inproc.py expects; the split is wrong."
                )
            if recorded and recorded != texts["context"]:
                notes.append(
                    f"The context texts memories_ingest built ({len(recorded)}) differ from the ones this script "
                    f"derived for the ceiling ({len(texts['context'])}): the ceiling may not match the server's work."
                )
        elif not args.no_split:
            notes.append("Stage split skipped: no database access.")
        common.log("in-process ceiling (after)")
        ceilings.append(inproc.run_task("ceiling", {"texts": texts, "repeat": args.repeat, "chunk": 1000}, env))
        ceiling = merge_ceilings(ceilings)
        for kind, before in ceilings[0]["embed"].items():
            rates = [before["texts"] / common.median(c["embed"][kind]["seconds"]) for c in ceilings]
            if max(rates) > 1.25 * min(rates):
                notes.append(
                    f"The model's rate on {kind} texts moved from {rates[0]:.1f}/s before the HTTP runs to "
                    f"{rates[-1]:.1f}/s after: the machine was not quiet; the ceiling and the % of it are unreliable."
                )
        if any(v["pending"] for v in verified.values()):
            notes.append("Some rows were stored with enrichment pending (a model was unavailable at write time).")
        if args.clients > 1:
            notes.append(
                "The ceiling is one process embedding with the server's threads; with several clients the "
                "gunicorn workers embed in parallel and together can exceed it (more than 100% of the ceiling)."
            )
        dedup = sum(r["deduplicated"] for r in runs)
        if dedup:
            notes.append(f"{dedup} writes were answered as duplicates (the corpus should have none).")
        report = build_report(
            {
                "args": args, "configs": configs, "runs": runs, "verified": verified, "split": split,
                "ceiling": ceiling, "machine": machine, "command": command, "target": target.describe(),
                "preload_from": len(rows),
                "db": db.available, "inproc_db": inproc_db, "notes": notes, "preloaded": preloaded,
                "table_rows": table_rows,
            }
        )  # fmt: skip
    series = f"preload {common.size_label(args.preload)}" if args.preload else ""
    header = common.report_header(__file__, headline(configs, runs), series=series, info=machine, command=command)
    common.write_report(report, out, header=header)
    return 0


def ceiling_texts(rows: list[dict], n: int) -> dict[str, list[str]]:
    """The texts the server embeds for the first ``n`` rows written with sequence=true: every
    content, and ``context + "\\n" + content`` where context = the one or two previous contents of
    the same run (memories.services._assign_context / join_context; runs continue across requests).
    Rows without a run_id are treated as one sequence (the corpus has none)."""
    history: dict[str | None, list[str]] = {}
    contexts = []
    for row in rows[:n]:
        previous = history.setdefault(row.get("run_id"), [])
        if previous:
            contexts.append("\n".join(previous[-2:]) + "\n" + row["content"])
        previous.append(row["content"])
    return {"content": [r["content"] for r in rows[:n]], "context": contexts}


def merge_ceilings(ceilings: list[dict]) -> dict:
    """One ceiling from the runs before and after the HTTP runs (all repetitions pooled)."""
    merged = {k: v for k, v in ceilings[0].items() if k not in ("embed", "lemmatize", "tokenize")}
    merged["parts"] = ceilings
    for name in ("embed", "lemmatize", "tokenize"):
        merged[name] = {}
        for kind, first in ceilings[0][name].items():
            merged[name][kind] = {
                **first,
                **{key: [x for c in ceilings for x in c[name][kind].get(key, [])] for key in ("seconds", "cpu")},
            }
    return merged


def stage_split(
    target: common.Target, env: dict, configs: list[Config], rows: list[dict], args: argparse.Namespace, db: Database
) -> dict:
    """memories_ingest with stage timers on the first ``--split-rows`` rows, every configuration,
    ``--repeat`` times, in one child process (fresh buckets, deleted and vacuumed afterwards)."""
    runs, buckets = [], []
    seq_batch = [c for c in configs if c.sequence and not c.single]
    record = f"{max(seq_batch, key=lambda c: c.batch_size).label}#1" if seq_batch else None
    with target.client() as c:
        for rep in range(1, args.repeat + 1):
            for cfg in configs:
                bucket = c.create_bucket(f"ingest-split-{cfg.label}-r{rep}-{int(time.time())}")
                buckets.append(bucket)
                runs.append(
                    {
                        "label": f"{cfg.label}#{rep}", "bucket_id": bucket, "batch_size": cfg.batch_size,
                        "sequence": cfg.sequence, "single": cfg.single, "rows": min(args.split_rows, cfg.rows),
                    }
                )  # fmt: skip
    try:
        common.log(f"in-process stage split: {len(runs)} runs of up to {args.split_rows} rows")
        return inproc.run_task(
            "ingest-split", {"rows": rows[: args.split_rows], "runs": runs, "record_texts": record}, env
        )
    finally:
        with target.client(timeout=600) as c:
            for b in buckets:
                with contextlib.suppress(common.ApiError):
                    c.delete_bucket(b)
        db.vacuum()


if __name__ == "__main__":
    raise SystemExit(main())
