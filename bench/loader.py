"""Loading the generated corpus into one bucket, resumably, and picking query sets for it.

Shared by ``search_latency.py`` and ``hnsw_recall.py`` (and the row reader by
``ingest_throughput.py``). Both scripts use the same tenant (``bench-corpus``) and bucket
(``corpus``), so one kept ``--home`` serves both: a bucket holds a *prefix* of the corpus file
(rows 0..N-1, or N rows from a given first row), and a larger ``--rows`` later only sends the rows
that are missing.

Progress is saved after every batch in ``$ENGRAM_HOME/bench-load-<bucket id>.json`` (completed
row ranges), so an interrupted load resumes where it stopped. A batch that was sent but not
recorded is sent again; the server deduplicates it (same text → same row), so a resume never
duplicates memories.
"""

from __future__ import annotations

import argparse
import json
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import common

TENANT = "bench-corpus"
BUCKET = "corpus"
DEFAULT_CORPUS = common.DATA_DIR / "corpus-100k.jsonl"
# make_corpus.py arguments that produced DEFAULT_CORPUS (queries are regenerated from them).
CORPUS_ROWS, CORPUS_SEED = 100_000, 1


def read_rows(path: Path, count: int, start: int = 0) -> list[dict]:
    """Rows ``start .. start+count-1`` of a corpus file, without the generator's ``bucket`` field."""
    rows: list[dict] = []
    with open(path, encoding="utf-8") as fh:
        for index, line in enumerate(fh):
            if index < start:
                continue
            if len(rows) >= count:
                break
            row = json.loads(line)
            row.pop("bucket", None)
            rows.append(row)
    if len(rows) < count:
        raise SystemExit(f"{path} has only {start + len(rows)} rows; {start + count} needed")
    return rows


# --------------------------------------------------------------------------------------------
# Resumable load
# --------------------------------------------------------------------------------------------


def _merge(ranges: list[list[int]]) -> list[list[int]]:
    merged: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return merged


def _missing(done: list[list[int]], first: int, end: int) -> list[tuple[int, int]]:
    """The row ranges of ``first .. end-1`` that ``done`` does not cover."""
    gaps, at = [], first
    for lo, hi in _merge(done):
        if lo > at:
            gaps.append((at, min(lo, end)))
        at = max(at, hi)
        if at >= end:
            break
    if at < end:
        gaps.append((at, end))
    return [(lo, hi) for lo, hi in gaps if hi > lo]


@dataclass
class LoadInfo:
    bucket_id: str
    rows: int
    memory_count: int
    sent_now: int
    seconds: float
    resumed: bool
    sequence: bool = True
    copies: dict | None = None

    def describe(self) -> str:
        if self.copies:
            c = self.copies
            return (
                f"the bucket holds {self.memory_count} memories: the first {c['api_rows']} rows written through the "
                f"API (sequence={str(self.sequence).lower()}), {c['copies']} SQL copies of them (new ids, hashes, "
                f"sequences and runs; vectors moved by uniform noise of +-{c['noise']} per dimension; "
                "`bench/loader.py` copy_to_size); nothing loaded now"
            )
        if not self.sent_now:
            return f"bucket already held the first {self.rows} rows ({self.memory_count} memories); nothing loaded"
        rate = self.sent_now / self.seconds if self.seconds else 0.0
        how = "resumed: " if self.resumed else ""
        return (
            f"{how}loaded {self.sent_now} rows in {self.seconds:.0f}s ({rate:.0f} rows/s, batches of 1000, "
            f"sequence={str(self.sequence).lower()}); the bucket holds {self.memory_count} memories"
        )


def add_load_arguments(p: argparse.ArgumentParser) -> None:
    """The corpus and load options of the scripts that measure a loaded bucket (see :func:`load`)."""
    p.add_argument("--load-clients", type=int, default=2, help="threads loading the corpus")
    p.add_argument(
        "--load-sequence",
        choices=("true", "false"),
        default="true",
        help="load as sequences (context embeddings, the API default) or as unrelated facts (~3x faster loads)",
    )
    p.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    p.add_argument(
        "--api-rows",
        type=int,
        help="write only the first N rows through the API and fill the bucket up to --rows with SQL copies "
        "of them (see copy_to_size); the copies are made once, then the script stops: rerun it to measure",
    )


def real_rows(args: argparse.Namespace) -> int:
    """How many of the bucket's rows are corpus rows written through the API (the rest are copies)."""
    return min(args.rows, args.api_rows) if getattr(args, "api_rows", None) else args.rows


def load(target: common.Target, args: argparse.Namespace) -> LoadInfo:
    """:func:`ensure_loaded` with the options of :func:`add_load_arguments` and ``--rows``; with
    ``--api-rows`` below ``--rows``, that many through the API and the rest as copies
    (:func:`copy_to_size`)."""
    api_rows = real_rows(args)
    sequence = args.load_sequence == "true"
    if api_rows < args.rows:
        copied = _copied(target)
        if copied is not None:
            if copied["rows"] != args.rows or copied["api_rows"] != api_rows:
                raise SystemExit(
                    f"this home's bucket holds {copied['api_rows']} API rows copied up to {copied['rows']}; "
                    "use the same --rows and --api-rows (or another --home)"
                )
            with target.client() as client:
                bucket_id = client.find_bucket(BUCKET)
                count = client.engram.get_bucket(bucket_id).memory_count
            info = LoadInfo(bucket_id, args.rows, count, 0, 0.0, False, sequence)
            info.copies = copied
            return info
        info = ensure_loaded(target, args.corpus, api_rows, clients=args.load_clients, sequence=sequence)
        copy_to_size(target, info.bucket_id, args.rows)
        raise SystemExit(
            f"the bucket now holds {args.rows} memories ({api_rows} written through the API, the rest SQL copies); "
            "run the same command again to measure on a server started after the copies"
        )
    return ensure_loaded(target, args.corpus, args.rows, clients=args.load_clients, sequence=sequence)


def _copied(target: common.Target) -> dict | None:
    path = target.home / "bench-copies.json" if target.home else None
    return json.loads(path.read_text()) if path and path.exists() else None


# The noise added to each dimension of a copy's vectors (uniform in +-COPY_NOISE): the copies are
# near their source, not on it, so that the HNSW graphs hold no exact duplicates.
COPY_NOISE = 0.01


def copy_to_size(target: common.Target, bucket_id: str, rows: int) -> dict:
    """Fill the bucket up to ``rows`` memories with SQL copies of the rows it holds (those written
    through the API): what ~40 minutes of embedding per 100k rows on this machine would give, in a
    few minutes. Copy ``c`` of a row has a new id and text hash, its own sequence (a new
    ``sequence_id`` per source sequence and copy, same places), its own run (``run_id`` + ``~c``),
    and its vectors moved by uniform noise of +-COPY_NOISE per dimension; text, lemmas, context,
    attribution, agent, dates and every other column are the source's. The indexes of ``memories``
    (but its primary key and the unique hash index) are dropped first and built again after the
    copies (bulk builds), then ``VACUUM ANALYZE``. Records what it did in
    ``$ENGRAM_HOME/bench-copies.json``; the servers started afterwards see the new table (statistics
    caches are per process)."""
    import inproc
    import psycopg

    env = target.private.env() if target.private is not None else inproc.child_env(home=target.home)[0]
    dsn = inproc.run_task("dsn", {}, env)
    started = time.perf_counter()
    with psycopg.connect(**dsn, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM memories WHERE bucket_id = %s", [bucket_id])
        source = cur.fetchone()[0]
        if source >= rows:
            return {"rows": source, "api_rows": source, "copies": 0}
        cur.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'memories' "
            "AND is_generated = 'NEVER' ORDER BY ordinal_position"
        )
        columns = [r[0] for r in cur.fetchall()]
        # Correlated with the row (s.id), so each row gets noise of its own.
        noise = (
            f"(SELECT array_agg(random() * {2 * COPY_NOISE} - {COPY_NOISE})::vector "
            "FROM generate_series(1, 384) g WHERE s.id IS NOT NULL)"
        )
        picked = {
            "id": "gen_random_uuid()",
            "text_hash": "left(md5(s.text_hash || '~' || c), 32)",
            "sequence_id": "md5(s.sequence_id::text || '~' || c)::uuid",
            "run_id": "s.run_id || '~' || c",
            "embedding": f"s.embedding + {noise}",
            "context_embedding": f"s.context_embedding + {noise.replace('g WHERE', 'g2 WHERE')}",
        }
        select = ", ".join(picked.get(col, f"s.{col}") for col in columns)
        cur.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'memories' "
            "AND indexname NOT IN ('memories_pkey', 'idx_memories_hash_unique')"
        )
        indexes = cur.fetchall()
        common.log(f"dropping {len(indexes)} indexes of memories; copying {source} rows up to {rows}")
        for name, _definition in indexes:
            cur.execute(f'DROP INDEX "{name}"')
        copies = -(-(rows - source) // source)
        cur.execute(
            f"INSERT INTO memories ({', '.join(columns)}) SELECT {select} FROM memories s "
            "CROSS JOIN generate_series(1, %s) c WHERE s.bucket_id = %s ORDER BY c, s.created_at, s.id LIMIT %s",
            [copies, bucket_id, rows - source],
        )
        copied_at = time.perf_counter()
        common.log(f"copied {rows - source} rows in {copied_at - started:.0f}s; building {len(indexes)} indexes")
        cur.execute("SET maintenance_work_mem = '2GB'")
        cur.execute("SET max_parallel_maintenance_workers = 1")
        for _name, definition in indexes:
            cur.execute(definition)
        cur.execute("VACUUM ANALYZE memories")
        cur.execute("SELECT count(*) FROM memories WHERE bucket_id = %s", [bucket_id])
        total = cur.fetchone()[0]
    done = {
        "rows": total,
        "api_rows": source,
        "copies": total - source,
        "copy_seconds": round(copied_at - started),
        "index_seconds": round(time.perf_counter() - copied_at),
        "noise": COPY_NOISE,
    }
    common.log(f"indexes built in {done['index_seconds']}s; the bucket holds {total} memories")
    if target.home:
        (target.home / "bench-copies.json").write_text(json.dumps(done))
    return done


def ensure_loaded(
    target: common.Target,
    corpus: Path,
    rows: int,
    *,
    clients: int = 2,
    batch: int = 1000,
    bucket_name: str = BUCKET,
    sequence: bool = True,
    start: int = 0,
) -> LoadInfo:
    """Make the bucket hold the first ``rows`` rows of ``corpus`` (from row ``start``: rows
    ``start .. start+rows-1``); send only what is missing.

    ``sequence=True`` (the API default) writes them like a client importing its history in
    order: each memory gets its run's predecessors as context, so two embeddings each.
    ``False`` writes unrelated facts: one embedding each, ~3x faster to load, but no context
    vectors or context text, so the context signals find nothing. A bucket is loaded one way
    only (recorded with the progress)."""
    with target.client() as client:
        bucket_id = client.find_bucket(bucket_name) or client.create_bucket(
            bucket_name, f"benchmark corpus ({corpus.name}, a prefix of it)"
        )
        count = client.engram.get_bucket(bucket_id).memory_count
    state_path = target.home / f"bench-load-{bucket_id}.json" if target.home else None
    state = {"corpus": str(corpus), "done": [], "sequence": sequence, "start": start}
    if state_path and state_path.exists():
        state = json.loads(state_path.read_text())
        if Path(state["corpus"]).name != corpus.name or state.setdefault("start", 0) != start:
            raise SystemExit(
                f"bucket {bucket_name!r} was loaded from row {state['start']} of {state['corpus']}, "
                f"not from row {start} of {corpus}"
            )
        if state.setdefault("sequence", True) != sequence:
            raise SystemExit(
                f"bucket {bucket_name!r} was loaded with sequence={str(state['sequence']).lower()}: "
                "use the same --load-sequence (or another --home)"
            )
    elif count:
        # No progress file (an existing server without --home): trust the row count; a shortfall
        # is resent whole from the last complete thousand, and the server deduplicates.
        state["done"] = [[start, start + (min(count, rows) // batch) * batch]]
    if count > rows:
        raise SystemExit(
            f"bucket {bucket_name!r} already holds {count} memories, more than --rows {rows}: "
            "use another --home (or a smaller one) so the measurement is at the size you ask for"
        )
    gaps = _missing(state["done"], start, start + rows)
    todo = [(lo, min(lo + batch, hi)) for lo, hi in gaps for lo in range(lo, hi, batch)]
    if not todo:
        return LoadInfo(bucket_id, rows, count, 0, 0.0, False, sequence)
    resumed = bool(state["done"])
    total = sum(hi - lo for lo, hi in todo)
    common.log(
        f"loading {total} rows of {corpus.name} into bucket {bucket_name} ({len(todo)} batches, {clients} clients)"
    )
    data = read_rows(corpus, rows, start)
    work: queue.Queue = queue.Queue()
    for item in todo:
        work.put(item)
    lock = threading.Lock()
    errors: list[BaseException] = []
    sent = [0]
    started = time.perf_counter()

    def worker() -> None:
        with target.client(timeout=600) as client:
            while not errors:
                try:
                    lo, hi = work.get_nowait()
                except queue.Empty:
                    return
                try:
                    client.ingest(bucket_id, data[lo - start : hi - start], sequence=sequence)
                except BaseException as exc:
                    errors.append(exc)
                    return
                with lock:
                    state["done"] = _merge([*state["done"], [lo, hi]])
                    sent[0] += hi - lo
                    if state_path:
                        tmp = state_path.with_suffix(".tmp")
                        tmp.write_text(json.dumps(state))
                        tmp.replace(state_path)
                    elapsed = time.perf_counter() - started
                    if sent[0] % (batch * 10) == 0 or sent[0] == total:
                        rate = sent[0] / elapsed
                        eta = (total - sent[0]) / rate if rate else 0
                        common.log(f"  {sent[0]}/{total} rows, {rate:.0f} rows/s, ~{eta / 60:.0f} min left")

    threads = [threading.Thread(target=worker, name=f"load-{i}", daemon=True) for i in range(max(1, clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"loading failed after {sent[0]} rows (rerun with the same --home to resume)") from errors[0]
    seconds = time.perf_counter() - started
    with target.client() as client:
        count = client.engram.get_bucket(bucket_id).memory_count
    if count < rows:
        common.log(f"warning: the bucket holds {count} memories for {rows} rows sent (duplicates in the corpus?)")
    return LoadInfo(bucket_id, rows, count, sent[0], seconds, resumed, sequence)


def build_graph(target: common.Target) -> tuple[str, float]:
    """Extract the knowledge graph of memories not yet processed (``manage.py rebuild_graph
    --pending``: resumable, idempotent). Needs the server's home; returns (message, seconds)."""
    if target.private is None and target.home is None:
        return "not built: an existing server without --home (graph mode measures whatever graph it has)", 0.0
    if target.private is not None:
        env = target.private.env()
    else:
        import inproc

        env, _ = inproc.child_env(home=target.home)
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "manage.py", "rebuild_graph", "--pending"],
        cwd=common.REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        # Not fatal: graph mode is then measured on the part of the graph that was built.
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        common.log(f"rebuild_graph --pending failed:\n{proc.stderr[-3000:]}")
        return f"**extraction failed** (`manage.py rebuild_graph --pending`: `{last[:300]}`)", seconds
    return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "done", seconds


# --------------------------------------------------------------------------------------------
# Queries
# --------------------------------------------------------------------------------------------


def query_pool(corpus: Path, rows: int, *, seed: int = CORPUS_SEED) -> tuple[list[dict], dict]:
    """Every distinct generated question about ``corpus`` (regenerated with make_corpus's own
    code, so there are ~26k at 100k rows instead of the 500 in queries-100k.jsonl), those about
    the loaded rows (``source_row < rows``) first. Each query gets ``filters``: its own when the
    generator gave it some, otherwise ``attributed_to`` or ``agent_id`` of its source row
    (alternating).

    ``corpus`` must be make_corpus output of ``--seed seed`` without ``--buckets``; its ``--rows``
    is the file's line count (the generator's stream depends on it: the first rows of a 1M file
    are not those of the 100k one)."""
    import make_corpus

    with open(corpus, "rb") as fh:
        generated = sum(1 for _ in fh)
    if corpus.resolve() != DEFAULT_CORPUS.resolve():
        common.log(f"note: queries are generated for make_corpus --rows {generated} --seed {seed}")
    # Ten requested per row at 100k give ~26k distinct texts; capped so a 1M corpus is not
    # asked for ten million.
    _, queries = make_corpus.generate(generated, seed, 0, None, queries=min(10 * generated, 10 * CORPUS_ROWS))
    source = {}
    wanted = {q["source_row"] for q in queries}
    with open(corpus, encoding="utf-8") as fh:
        for index, line in enumerate(fh):
            if index in wanted:
                source[index] = json.loads(line)
    for i, q in enumerate(queries):
        q["own_filters"] = "filters" in q
        # The memory the question was generated from (in the bucket when source_row < rows).
        q["source_content"] = source[q["source_row"]]["content"] if q["source_row"] < rows else None
        if "filters" not in q:
            row = source[q["source_row"]]
            q["filters"] = {"attributed_to": row["attributed_to"]} if i % 2 else {"agent_id": row["agent_id"]}
    about = [q for q in queries if q["source_row"] < rows]
    other = [q for q in queries if q["source_row"] >= rows]
    info = {"distinct": len(queries), "about_loaded": len(about)}
    return about + other, info


def deal(pool: list[dict], slots: int, per_slot: int) -> list[list[dict]]:
    """Deal ``slots`` disjoint sets of ``per_slot`` queries round-robin, so every set has the same
    mix (queries about loaded rows come first in the pool and spread evenly)."""
    need = slots * per_slot
    if need > len(pool):
        raise SystemExit(
            f"{need} distinct queries needed ({slots} sets x {per_slot}) but only {len(pool)} exist: "
            "lower --queries or --repeat"
        )
    return [pool[s:need:slots] for s in range(slots)]


def describe_filters(queries: list[dict]) -> str:
    kinds: dict[str, int] = {}
    for q in queries:
        key = "+".join(sorted(q["filters"])) + ("" if q.get("own_filters") else " (derived)")
        kinds[key] = kinds.get(key, 0) + 1
    return ", ".join(f"{k}: {v}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
