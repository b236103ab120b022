"""Bounded load test: mixed ingest + search through HTTP, then every acknowledged write is checked.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/load_test.py --duration 120 --writers 3 --searchers 3

A private server (or ``--base-url``/``--token``) on loopback gets a fresh bucket, seeded with
``--seed-rows`` rows of the corpus so searches have something to rank. Then, for ``--duration``
seconds, ``--writers`` threads write and ``--searchers`` threads search, each on its own
keep-alive connection, as fast as the server answers:

* a writer sends a single memory (``--single-share`` of its requests) or a batch of 2-20. Each
  item is new text unique to the writer, or (``--shared-share`` of the items) one of
  ``--shared-texts`` texts that *every* writer sends, in its own order, so the same text is
  written concurrently by several clients; a shared text is sometimes re-cased or re-spaced
  (same normalised text, so the server must answer with the same row);
* a searcher sends a generated question in ``hybrid`` (60%), ``keyword`` (20%) or ``vector``
  (20%) mode, limit 10, a quarter of them with a filter.

Every answer is recorded: status, latency, and for 201s the ``{id, deduplicated}`` of each item.
No request is retried, so an error is an error. Afterwards the bucket is listed in full and
checked: every acknowledged item's id exists and holds that item's text; every normalised
text acknowledged by anyone is stored exactly once, and everyone who wrote it was given the
same id; the row count equals seed rows + distinct acknowledged texts (+ rows of requests
that failed after the server committed, reported separately). The report (Markdown, to
``bench/results/load-<date>.md`` or ``--out``) gives throughput, error rate by status and
latency percentiles per operation, and the verification.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import common
import loader

from memories.text import normalize_for_hash

MODES = (("hybrid", 0.6), ("keyword", 0.2), ("vector", 0.2))


class Recorder:
    """Thread-safe record of every request and of every acknowledged item."""

    def __init__(self):
        self.lock = threading.Lock()
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.status: dict[str, Counter] = defaultdict(Counter)
        self.errors: list[str] = []
        # normalised text -> set of ids the server acknowledged for it
        self.acked: dict[str, set[str]] = defaultdict(set)
        # id -> the exact texts acknowledged under it (re-cased variants of one text share an id)
        self.texts_by_id: dict[str, set[str]] = defaultdict(set)
        self.items_acked = 0
        self.items_deduplicated = 0
        self.items_unacked = 0
        self.unacked_texts: set[str] = set()

    def request(self, op: str, status: int, seconds: float, error: str | None = None) -> None:
        with self.lock:
            self.status[op][status] += 1
            if status in (200, 201):
                self.latency[op].append(seconds)
            elif error and len(self.errors) < 20:
                self.errors.append(f"{op}: {error}")

    def acknowledge(self, items: list[str], results: list[dict]) -> None:
        with self.lock:
            for text, result in zip(items, results, strict=True):
                key = normalize_for_hash(text)
                self.acked[key].add(str(result["id"]))
                self.texts_by_id[str(result["id"])].add(text)
                self.items_acked += 1
                self.items_deduplicated += bool(result["deduplicated"])

    def lost(self, items: list[str]) -> None:
        with self.lock:
            self.items_unacked += len(items)
            self.unacked_texts.update(normalize_for_hash(t) for t in items)


def variant(text: str, rng: random.Random) -> str:
    """The same normalised text, written differently (case, spacing, trailing punctuation)."""
    choice = rng.randrange(4)
    if choice == 0:
        return text.upper()
    if choice == 1:
        return "  " + text.replace(" ", "   ") + " "
    if choice == 2:
        return text.rstrip(".") + "!"
    return text


def writer(index: int, target: common.Target, bucket: str, args, pool: list[str], shared: list[str], rec, stop):
    rng = random.Random(args.seed * 1000 + index)
    client = target.client(timeout=args.timeout)
    own = 0
    try:
        while not stop.is_set():
            size = 1 if rng.random() < args.single_share else rng.randint(2, 20)
            items = []
            for _ in range(size):
                if rng.random() < args.shared_share:
                    items.append(variant(rng.choice(shared), rng))
                else:
                    own += 1
                    items.append(f"Load writer {index} note {own}: {rng.choice(pool)}")
            body = {"content": items[0]} if size == 1 else {"memories": [{"content": t} for t in items]}
            op = "write (single)" if size == 1 else "write (batch)"
            started = time.perf_counter()
            try:
                response = client.request("POST", f"/api/v1/buckets/{bucket}/memories", body, expect=None)
            except OSError as exc:  # timeout, reset: not acknowledged
                rec.request(op, 0, time.perf_counter() - started, repr(exc))
                rec.lost(items)
                client.close()
                continue
            rec.request(op, response.status, response.elapsed, str(response.data)[:200])
            if response.status == 201:
                rec.acknowledge(items, response.data["results"])
            else:
                rec.lost(items)
    finally:
        client.close()


def searcher(index: int, target: common.Target, bucket: str, args, queries: list[dict], rec, stop):
    rng = random.Random(args.seed * 2000 + index)
    client = target.client(timeout=args.timeout)
    try:
        while not stop.is_set():
            query = rng.choice(queries)
            mode = rng.choices([m for m, _ in MODES], weights=[w for _, w in MODES])[0]
            body = {"query": query["query"], "mode": mode, "limit": 10}
            if rng.random() < 0.25:
                body["filters"] = query["filters"]
            started = time.perf_counter()
            try:
                response = client.request("POST", f"/api/v1/buckets/{bucket}/search", body, expect=None)
            except OSError as exc:
                rec.request(f"search ({mode})", 0, time.perf_counter() - started, repr(exc))
                client.close()
                continue
            rec.request(f"search ({mode})", response.status, response.elapsed, str(response.data)[:200])
    finally:
        client.close()


def verify(target: common.Target, bucket: str, seed_texts: set[str], rec: Recorder) -> dict:
    """Compare the stored bucket with what the server acknowledged."""
    client = target.client(timeout=300)
    stored: dict[str, str] = {}
    try:
        for memory in client.engram.list_memories(bucket, page_size=500):
            stored[str(memory.id)] = memory.content
    finally:
        client.close()
    rows_by_text: dict[str, list[str]] = defaultdict(list)
    for memory_id, content in stored.items():
        rows_by_text[normalize_for_hash(content)].append(memory_id)

    missing = [i for ids in rec.acked.values() for i in ids if i not in stored]
    wrong_text = [
        i
        for i, texts in rec.texts_by_id.items()
        if i in stored and {normalize_for_hash(t) for t in texts} != {normalize_for_hash(stored[i])}
    ]
    split_ids = [text for text, ids in rec.acked.items() if len(ids) != 1]
    duplicated = [text for text, ids in rows_by_text.items() if len(ids) != 1]
    expected = seed_texts | set(rec.acked)
    unexplained = [t for t in rows_by_text if t not in expected and t not in rec.unacked_texts]
    stored_unacked = [t for t in rows_by_text if t not in expected and t in rec.unacked_texts]
    return {
        "rows": len(stored),
        "seed_rows": len(seed_texts),
        "distinct_acknowledged_texts": len(rec.acked),
        "acknowledged_ids_missing": len(missing),
        "acknowledged_ids_with_other_text": len(wrong_text),
        "texts_given_several_ids": len(split_ids),
        "texts_stored_more_than_once": len(duplicated),
        "rows_from_unacknowledged_requests": len(stored_unacked),
        "rows_nobody_wrote": len(unexplained),
        "ok": not (missing or wrong_text or split_ids or duplicated or unexplained)
        and len(stored) == len(expected) + len(stored_unacked),
    }


def report(args, target: common.Target, rec: Recorder, seconds: float, check: dict, seed_info: str) -> str:
    rows = []
    total_requests = total_errors = 0
    for op in sorted(rec.status):
        counts = rec.status[op]
        n = sum(counts.values())
        ok = counts.get(200, 0) + counts.get(201, 0)
        total_requests += n
        total_errors += n - ok
        lat = common.latency_summary(rec.latency[op])
        errors = ", ".join(f"{s or 'no answer'}: {c}" for s, c in sorted(counts.items()) if s not in (200, 201))
        rows.append(
            [op, n, f"{n / seconds:.1f}", f"{(n - ok) / n:.2%}" if n else "-", errors or "-"]
            + [f"{lat.get(p, float('nan')):.1f}" for p in ("p50", "p95", "p99", "max")]
        )
    table = common.markdown_table(
        ["operation", "requests", "req/s", "error rate", "errors by status", "p50 ms", "p95 ms", "p99 ms", "max ms"],
        rows,
        "lrrrlrrrr",
    )
    verdict = "**every acknowledged write is present exactly once**" if check["ok"] else "**VERIFICATION FAILED**"
    check_rows = [[k.replace("_", " "), v] for k, v in check.items() if k != "ok"]
    lines = [
        f"# Load test: mixed ingest + search ({time.strftime('%Y-%m-%d', time.gmtime())})",
        "",
        "## Setup",
        "",
        common.machine_markdown(),
        f"- server: {target.describe()}",
        f"- command: `{common.command_line()}`",
        f"- clients: {args.writers} writers + {args.searchers} searchers, one keep-alive connection each, "
        f"no think time, no retries; {seconds:.0f} s",
        f"- bucket: {seed_info}",
        f"- writes: {args.single_share:.0%} single memories, the rest batches of 2-20; "
        f"{args.shared_share:.0%} of items drawn from {args.shared_texts} texts every writer sends "
        "(some re-cased / re-spaced: same normalised text)",
        "- searches: hybrid 60%, keyword 20%, vector 20%, limit 10, a quarter with a filter",
        "",
        "## Requests",
        "",
        table,
        "",
        f"Total: {total_requests} requests in {seconds:.0f} s ({total_requests / seconds:.1f} req/s), "
        f"{total_errors} errors ({(total_errors / total_requests if total_requests else 0):.2%}). "
        f"Items acknowledged: {rec.items_acked} ({rec.items_acked / seconds:.1f}/s), of which "
        f"{rec.items_deduplicated} answered as duplicates; items in failed requests: {rec.items_unacked}.",
        "",
        "## Verification",
        "",
        verdict,
        "",
        common.markdown_table(["check", "value"], check_rows, "lr"),
    ]
    if rec.errors:
        lines += ["", "First errors:", "", *[f"- `{e}`" for e in rec.errors]]
    return "\n".join(lines)


def headline(args, rec: Recorder, seconds: float, check: dict) -> str:
    requests = sum(sum(c.values()) for c in rec.status.values())
    errors = sum(n for c in rec.status.values() for status, n in c.items() if status not in (200, 201))
    p95 = {op: common.latency_summary(rec.latency[op]).get("p95") for op in ("search (hybrid)", "write (batch)")}
    figures = ", ".join(f"{op} p95 {value:.0f} ms" for op, value in p95.items() if value is not None)
    return (
        f"{args.writers} writers + {args.searchers} searchers for {seconds:.0f} s: {requests} requests, {errors} errors"
        f"; {figures}; every acknowledged write {'verified' if check['ok'] else 'NOT verified'}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of load (default 120)")
    parser.add_argument("--writers", type=int, default=3)
    parser.add_argument("--searchers", type=int, default=3)
    parser.add_argument("--seed-rows", type=int, default=5000, help="corpus rows loaded before the run")
    parser.add_argument("--single-share", type=float, default=0.3, help="share of writes that are one memory")
    parser.add_argument("--shared-share", type=float, default=0.25, help="share of items every writer also sends")
    parser.add_argument("--shared-texts", type=int, default=300)
    parser.add_argument("--timeout", type=float, default=60.0, help="client timeout per request, seconds")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--corpus", type=Path, default=loader.DEFAULT_CORPUS)
    parser.add_argument("--out", type=Path, help="report path (default bench/results/load-<date>.md)")
    common.add_server_args(parser)
    args = parser.parse_args()
    if not args.corpus.exists():
        raise SystemExit(
            f"{args.corpus} is missing: python bench/make_corpus.py --rows 100000 --seed 1 --out {args.corpus}"
        )

    rows = loader.read_rows(args.corpus, args.seed_rows + 20_000)
    seed_rows, pool_rows = rows[: args.seed_rows], rows[args.seed_rows :]
    pool = [r["content"] for r in pool_rows]
    rng = random.Random(args.seed)
    shared = [f"Shared load fact {i}: {t}" for i, t in enumerate(rng.sample(pool, args.shared_texts))]
    queries, _ = loader.query_pool(args.corpus, args.seed_rows)
    queries = queries[: max(1000, args.seed_rows)]

    with common.server_from_args(args) as target:
        client = target.client(timeout=600)
        bucket = client.create_bucket(f"load-{int(time.time())}")
        started = time.perf_counter()
        for lo in range(0, len(seed_rows), 1000):
            client.ingest(bucket, seed_rows[lo : lo + 1000])
        seed_info = f"{len(seed_rows)} corpus rows loaded first ({time.perf_counter() - started:.0f} s)"
        client.close()
        common.log(seed_info)
        seed_texts = {normalize_for_hash(r["content"]) for r in seed_rows}

        rec, stop = Recorder(), threading.Event()
        threads = [
            threading.Thread(target=writer, args=(i, target, bucket, args, pool, shared, rec, stop))
            for i in range(args.writers)
        ] + [
            threading.Thread(target=searcher, args=(i, target, bucket, args, queries, rec, stop))
            for i in range(args.searchers)
        ]
        common.log(f"load: {args.writers} writers + {args.searchers} searchers for {args.duration:.0f} s")
        started = time.perf_counter()
        for t in threads:
            t.start()
        time.sleep(args.duration)
        stop.set()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - started
        common.log(f"load done in {seconds:.0f} s; verifying")
        check = verify(target, bucket, seed_texts, rec)
        text = report(args, target, rec, seconds, check, seed_info)
    header = common.report_header(__file__, headline(args, rec, seconds, check))
    common.write_report(text, args.out or common.default_report_path("load"), header=header)
    return 0 if check["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
