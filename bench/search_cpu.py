"""CPU per search through HTTP: the web server's processes and PostgreSQL's, per search, on a kept
home, with 1 and N clients; and throughput. Robust on a shared machine (CPU seconds, not wall).

    ./engram bench search_cpu.py --home /work/homes/bench-100k --rows 100000 --api-rows 8000 --searches 200

The server is started on ``--home`` as ``search_latency.py`` starts it (``bench/common.py``); the
bucket must already hold its rows (``bench/loader.py``). Every query text is sent once (the query
embedding cache would otherwise answer). Per condition: searches/s, p50/p95 (ms), and the CPU
seconds of the gunicorn workers and of the whole PostgreSQL server (postmaster and all its
children) over the condition, per search.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path

import common
import loader


def _ticks(pid: int) -> int:
    fields = common._proc_stat(pid)
    return 0 if fields is None else common._ticks(fields)


def _children(ppid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = common._proc_stat(int(entry.name))
            if fields is not None and int(fields[1]) == ppid:
                out.append(int(entry.name))
    return out


def _gunicorn_master(port: int) -> int:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "gunicorn" in cmd and f"127.0.0.1:{port}" in cmd:
                fields = common._proc_stat(int(entry.name))
                if fields is not None and "gunicorn" not in (
                    Path(f"/proc/{fields[1]}/cmdline").read_bytes().decode(errors="ignore")
                ):
                    return int(entry.name)
    raise SystemExit("gunicorn master not found")


def cpu_now(master: int, postmaster: int) -> tuple[float, float]:
    hz = os.sysconf("SC_CLK_TCK")
    web = sum(_ticks(p) for p in [master, *_children(master)])
    fields = common._proc_stat(postmaster)
    db = common._ticks(fields) + int(fields[13]) + int(fields[14]) + sum(_ticks(p) for p in _children(postmaster))
    return web / hz, db / hz


def run(clients, bucket, queries, limit) -> dict:
    latencies: list[float] = []
    lock = threading.Lock()
    work = list(queries)

    def worker(i: int, ready) -> None:
        client = clients[i]
        ready()
        while True:
            with lock:
                if not work:
                    return
                query = work.pop()
            started = time.perf_counter()
            client.search(bucket, query, mode="hybrid", limit=limit)
            with lock:
                latencies.append(time.perf_counter() - started)

    wall = common.run_together(worker, len(clients))
    return {"wall": wall, "latencies": latencies}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=100_000)
    loader.add_load_arguments(p)
    common.add_server_args(p)
    p.add_argument("--searches", type=int, default=200, help="searches per condition per pass")
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--label", default="")
    p.add_argument("--json-out", type=Path)
    args = p.parse_args()
    pool, _ = loader.query_pool(args.corpus, loader.real_rows(args))
    texts = [q["query"] for q in pool]
    conds = [1, args.clients]
    need = (2 + args.repeat * len(conds)) * args.searches
    if need > len(texts):
        raise SystemExit(f"{need} distinct queries needed, {len(texts)} exist")
    results = []
    with common.server_from_args(args, tenant=loader.TENANT) as target:
        load = loader.load(target, args)
        port = int(target.base_url.rsplit(":", 1)[1])
        master = _gunicorn_master(port)
        postmaster = int((target.home / "pgdata" / "postmaster.pid").read_text().split()[0])
        clients = [target.client(timeout=300) for _ in range(args.clients)]
        at = 0
        warm = texts[at : at + 2 * args.searches]
        at += len(warm)
        run(clients, load.bucket_id, warm, args.limit)
        for rep in range(args.repeat):
            for n in conds:
                part = texts[at : at + args.searches]
                at += len(part)
                load_before = os.getloadavg()[0]
                web0, db0 = cpu_now(master, postmaster)
                out = run(clients[:n], load.bucket_id, part, args.limit)
                web1, db1 = cpu_now(master, postmaster)
                lat = common.latency_summary(out["latencies"])
                row = {"pass": rep + 1, "clients": n, "searches": len(part), "per_s": len(part) / out["wall"],
                       "p50": lat["p50"], "p95": lat["p95"], "web_cpu_ms": (web1 - web0) * 1000 / len(part),
                       "db_cpu_ms": (db1 - db0) * 1000 / len(part), "load": load_before}  # fmt: skip
                results.append(row)
                common.log(
                    f"[{rep + 1}] clients={n}: {row['per_s']:.1f}/s p50 {row['p50']:.1f} p95 {row['p95']:.1f} ms; "
                    f"CPU per search web {row['web_cpu_ms']:.1f} + db {row['db_cpu_ms']:.1f} ms; load {load_before:.1f}"
                )
        for c in clients:
            c.close()
    summary = {}
    for n in conds:
        rows = [r for r in results if r["clients"] == n]
        summary[n] = {
            k: common.median([r[k] for r in rows]) for k in ("per_s", "p50", "p95", "web_cpu_ms", "db_cpu_ms", "load")
        }
        s = summary[n]
        common.log(
            f"{args.label} median clients={n}: {s['per_s']:.1f}/s p50 {s['p50']:.1f} p95 {s['p95']:.1f} ms; "
            f"CPU web {s['web_cpu_ms']:.1f} + db {s['db_cpu_ms']:.1f} ms per search; load {s['load']:.1f}"
        )
    common.log(
        f"{args.label} scaling {args.clients} clients / 1: {summary[args.clients]['per_s'] / summary[1]['per_s']:.2f}x"
    )
    if args.json_out:
        args.json_out.write_text(json.dumps({"label": args.label, "passes": results, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
