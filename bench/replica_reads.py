"""Read-your-writes on a read replica: wait for the replica, or read the primary after a write?

Starts a primary and a hot standby streaming from it (the embedded wheel's PostgreSQL 18 on
loopback, tests/support/replication.py), migrates, fills one bucket of an "agents" tenant with
``--rows`` memories, and serves Engram with ``DATABASE_REPLICA_URL`` (one gunicorn, 2 threads;
embeddings off, keyword searches: the database's share of a search is what moves). For each
condition, in turn and ``--repeat`` times:

- ``wait``: ENGRAM_READ_YOUR_WRITES=wait — after a write, the tenant's reads wait for the
  replica to replay past the primary's position (ENGRAM_REPLICA_WAIT_MS bound);
- ``primary``: ENGRAM_READ_YOUR_WRITES=primary — after a write, the tenant's reads go to the
  primary for ENGRAM_REPLICA_WINDOW seconds;
- ``none``: no replica at all (everything on the primary), for reference.

The load, ``--seconds`` per run: ``--agents`` agents each write one memory with a word of its own
and at once search for it (read-your-writes: found or not), then search ``--turn`` more times;
a background writer of another tenant writes batches of 20 all along (the replica always has
WAL to replay). Reported per condition (medians over repeats): the search right after a write
(p50/p95), the other searches, the share of reads the replica answered, read-your-writes misses,
and what the replica chose (engram_replica_reads_total).

Run it with ``nice`` on a shared machine, and say the load (the report records ``uptime``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from common import (
    default_report_path,
    latency_summary,
    log,
    machine_info,
    machine_markdown,
    median,
    report_header,
)

from tests.scripts.http_writer import call
from tests.support import base_env, http_get, manage, web_server
from tests.support.replication import StandbyPair

PROVISION = """
import json
from engram_site.scoping import scopes_disabled
from memories.services import MemoryInput, memories_ingest
from memories.services.buckets import bucket_create
from tenants import services
out = {}
for name in ("agents", "background"):
    tenant = services.tenant_create(name=name)
    bucket = bucket_create(tenant=tenant, name="bench")
    token = services.token_issue(tenant=tenant, name=name, scopes=["read", "write"])
    out[name] = {"bucket": str(bucket.pk), "token": token.secret}
with scopes_disabled():
    from tenants.models import Bucket
    bucket = Bucket.objects.get(pk=out["agents"]["bucket"])
    words = ["harbour", "lamp", "ledger", "orchard", "pylon", "quarry", "saddle", "tunnel", "valley", "willow"]
    for start in range(0, ROWS, 500):
        memories_ingest(bucket=bucket, sequence=False, items=[
            MemoryInput(content=f"Note {i}: the {words[i % 10]} near site {i % 97} was checked on day {i % 31}")
            for i in range(start, min(ROWS, start + 500))
        ])
print(json.dumps(out))
"""


def _uptime() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _replica_reads(base: str) -> Counter:
    status, body = http_get(base + "/metrics")
    found: Counter = Counter()
    if status != 200:
        return found
    pattern = r'^engram_replica_reads_total\{database="(\w+)",reason="(\w+)"\} ([0-9.e+]+)$'
    for database, reason, value in re.findall(pattern, body.decode(), re.MULTILINE):
        found[f"{database}/{reason}"] += float(value)
    return found


def run_load(base: str, ids: dict, *, seconds: float, agents: int, turn: int) -> dict:
    stop = threading.Event()
    after_write: list[float] = []
    other: list[float] = []
    writes: list[float] = []
    misses = [0]
    lock = threading.Lock()
    agent = ids["agents"]
    path = f"/api/v1/buckets/{agent['bucket']}"

    def timed(method: str, url: str, token: str, body: dict) -> tuple[int, dict, float]:
        started = time.perf_counter()
        status, payload, _ = call(method, url, token, body, timeout=60)
        return status, payload, time.perf_counter() - started

    def agent_loop(n: int) -> None:
        k = 0
        words = ["harbour", "lamp", "ledger", "orchard", "pylon", "quarry", "saddle", "tunnel", "valley", "willow"]
        while not stop.is_set():
            word = f"zq{n}x{k}w"
            status, _, took = timed("POST", base + path + "/memories", agent["token"],
                                    {"content": f"Agent {n} filed report {word} on turn {k}"})  # fmt: skip
            if status != 201:
                raise RuntimeError(f"write answered {status}")
            status, found, searched = timed("POST", base + path + "/search", agent["token"],
                                            {"query": word, "mode": "keyword"})  # fmt: skip
            if status != 200:
                raise RuntimeError(f"search answered {status}")
            hit = any(word in h["content"] for h in found["results"])
            laters = []
            for j in range(turn):
                query = f"{words[(k + j) % 10]} site {(k * 7 + j) % 97}"
                status, _, took_j = timed("POST", base + path + "/search", agent["token"],
                                          {"query": query, "mode": "keyword"})  # fmt: skip
                if status != 200:
                    raise RuntimeError(f"search answered {status}")
                laters.append(took_j)
            with lock:
                writes.append(took)
                after_write.append(searched)
                other.extend(laters)
                misses[0] += not hit
            k += 1

    def background() -> None:
        b = ids["background"]
        k = 0
        while not stop.is_set():
            call("POST", f"{base}/api/v1/buckets/{b['bucket']}/memories", b["token"],
                 {"memories": [{"content": f"Background entry {k}-{i} about crate {k * 20 + i}"} for i in range(20)],
                  "sequence": False}, timeout=60)  # fmt: skip
            k += 1
            stop.wait(0.2)

    before = _replica_reads(base)
    threads = [threading.Thread(target=agent_loop, args=(n,)) for n in range(agents)]
    threads.append(threading.Thread(target=background))
    for thread in threads:
        thread.start()
    stop.wait(seconds)
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    reads = _replica_reads(base) - before
    total = sum(reads.values())
    return {
        "after_write": latency_summary(after_write),
        "other": latency_summary(other),
        "write": latency_summary(writes),
        "misses": misses[0],
        "reads": dict(reads),
        "replica_share": (sum(v for k, v in reads.items() if k.startswith("replica/")) / total) if total else 0.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--agents", type=int, default=2)
    parser.add_argument("--turn", type=int, default=3, help="searches after the one that checks the write")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--conditions", default="wait,primary,none")
    parser.add_argument("--report", type=Path, default=None)
    args = parser.parse_args()
    conditions = args.conditions.split(",")
    info = machine_info()
    root = Path(tempfile.mkdtemp(prefix="engram-bench-replica-", dir="/tmp"))
    root.chmod(0o755)
    home = root / "home"
    pair = StandbyPair(home, root / "standby-area")
    runs: dict[str, list[dict]] = {c: [] for c in conditions}
    try:
        env = base_env(
            DATABASE_URL=pair.primary.url, ENGRAM_HOME=str(home), ENGRAM_TOKEN_RATE="10000000/min",
            ENGRAM_EMBEDDINGS="off", ENGRAM_PRELOAD_MODELS="0", ENGRAM_RUN_WORKER="0", PYTHONUNBUFFERED="1",
        )  # fmt: skip
        manage("migrate", "--noinput", "-v", "0", env=env, timeout=900)
        started = time.perf_counter()
        out = manage("shell", "-c", PROVISION.replace("ROWS", str(args.rows)), env=env, timeout=1800).stdout
        ids = json.loads(out.strip().splitlines()[-1])
        manage("shell", "-c", "from django.db import connection; connection.cursor().execute('ANALYZE')", env=env)
        log(f"{args.rows} memories in {time.perf_counter() - started:.0f}s")
        pair.create()
        for repeat in range(args.repeat):
            for condition in conditions:
                extra = {} if condition == "none" else {
                    "DATABASE_REPLICA_URL": pair.url, "ENGRAM_READ_YOUR_WRITES": condition,
                }  # fmt: skip
                load_before = _uptime()
                with web_server({**env, **extra}, workers=1, threads=4, log=root / f"web-{condition}.log") as base:
                    # Warm: the lemmatizer loaded, connections open, caches filled.
                    run_load(base, ids, seconds=5, agents=args.agents, turn=args.turn)
                    result = run_load(base, ids, seconds=args.seconds, agents=args.agents, turn=args.turn)
                result["load"] = f"{load_before} -> {_uptime()}"
                runs[condition].append(result)
                log(f"run {repeat + 1} {condition}: after write p50 {result['after_write']['p50']:.1f} ms, "
                    f"p95 {result['after_write']['p95']:.1f}; others p50 {result['other']['p50']:.1f}; "
                    f"replica share {result['replica_share']:.2f}; misses {result['misses']}")  # fmt: skip
    finally:
        pair.close()
    report = render(args, info, runs)
    path = args.report or default_report_path("replica-reads")
    path.write_text(report)
    log(f"report: {path}")
    return 0


def _med(runs: list[dict], part: str, key: str) -> float:
    return median([r[part][key] for r in runs if r[part].get("count")])


def render(args, info, runs: dict[str, list[dict]]) -> str:
    summary = {
        c: {
            "after_p50": _med(rs, "after_write", "p50"), "after_p95": _med(rs, "after_write", "p95"),
            "other_p50": _med(rs, "other", "p50"), "other_p95": _med(rs, "other", "p95"),
            "write_p50": _med(rs, "write", "p50"),
            "share": median([r["replica_share"] for r in rs]), "misses": sum(r["misses"] for r in rs),
            "searches": median([r["after_write"]["count"] + r["other"]["count"] for r in rs]),
        }
        for c, rs in runs.items() if rs
    }  # fmt: skip
    parts = [f"{c}: after-write p95 {s['after_p95']:.1f} ms, replica {s['share']:.0%}" for c, s in summary.items()]
    headline = "; ".join(parts) + f"; read-your-writes misses {sum(s['misses'] for s in summary.values())}"
    lines = [
        report_header("replica_reads.py", headline, series=f"{args.rows // 1000}k", info=info),
        "",
        "# Read-your-writes on a read replica: wait for it, or read the primary",
        "",
        machine_markdown(info),
        f"- topology: primary + hot standby (PostgreSQL 18 streaming replication, loopback), one gunicorn "
        f"(1 worker x 4 threads), embeddings off, keyword searches; a bucket of {args.rows} memories",
        f"- load: {args.agents} agents, each: write a memory, search for it at once, then {args.turn} more searches; "
        f"a background writer (another tenant) posting 20 memories every 0.2 s; {args.seconds:.0f} s per run "
        f"after 5 s of warm-up; {args.repeat} runs per condition, interleaved; figures are medians over runs",
        "",
        "| condition | search after a write p50 / p95 ms | other searches p50 / p95 ms | write p50 ms "
        "| searches per run | answered by the replica | read-your-writes misses |",
        "| :--- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c, s in summary.items():
        lines.append(
            f"| {c} | {s['after_p50']:.1f} / {s['after_p95']:.1f} | {s['other_p50']:.1f} / {s['other_p95']:.1f} "
            f"| {s['write_p50']:.1f} | {s['searches']:.0f} | {s['share']:.0%} | {s['misses']} |"
        )
    lines += ["", "Every run (load = 1/5/15-minute averages at start -> end; reads = engram_replica_reads_total):", "",
              "| condition | after a write p50 / p95 | others p50 / p95 | replica share | misses | reads | load |",
              "| :--- | ---: | ---: | ---: | ---: | :--- | :--- |"]  # fmt: skip
    for c, rs in runs.items():
        for r in rs:
            reads = ", ".join(f"{k} {v:.0f}" for k, v in sorted(r["reads"].items()))
            lines.append(
                f"| {c} | {r['after_write']['p50']:.1f} / {r['after_write']['p95']:.1f} "
                f"| {r['other']['p50']:.1f} / {r['other']['p95']:.1f} | {r['replica_share']:.0%} | {r['misses']} "
                f"| {reads} | {r['load']} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
