"""In-process measurements with Engram's own functions, in a child process configured like the server.

The HTTP benchmarks cannot see inside a request, and the server code is not instrumented. So the
parts a benchmark wants to split out (embedding, lemmatizing, the database; the raw model
throughput; embedding a query) are measured here, in a separate Python process on the same
machine, with the same environment as the server (``ENGRAM_HOME`` → the same embedded PostgreSQL,
the same ``ENGRAM_TORCH_THREADS``), calling the project's functions directly:

* ``memories.services.memories_ingest`` — the function the write endpoint calls — with timers
  wrapped (in this child process only) around ``engram_site.providers.embedding.embed_texts``,
  ``engram_site.providers.embedding.count_tokens``, ``engram_site.providers.lemmatizer.lemmatize_many``,
  every SQL statement
  and commit (``connection.execute_wrapper``), and the post-commit hint publishing. Times are
  *exclusive* (a stage nested in another is not counted twice); what is left is Python (context
  assignment, hashing, vector formatting, the insert's parameter building).
* ``engram_site.providers.embedding.embed_texts`` on the same texts in large batches: the model's ceiling.
* ``engram_site.providers.embedding.embed_query`` on distinct query texts (no cache hits).

Parents call :func:`run_task`; the child is ``python bench/inproc.py TASK REQUEST.json RESULT.json``.
Progress goes to stderr. Nothing here is imported by the server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import common

BENCH_DIR, REPO_ROOT = common.BENCH_DIR, common.REPO_ROOT

STAGES = ("embedding", "tokenizer", "lemmatizing", "database", "queue hints")


def log(msg: str) -> None:
    print(f"[inproc] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------------------------


def child_env(private_env: dict[str, str] | None = None, home: Path | None = None) -> tuple[dict[str, str], str]:
    """The environment of an in-process child, and what database it sees.

    ``private_env``: a PrivateServer's ``env()`` (same home, same database, same settings).
    ``home``: the ``ENGRAM_HOME`` of a server started elsewhere. Otherwise ``$DATABASE_URL`` if
    set; failing that, no database (``"none"``): a placeholder URL keeps Django from starting an
    embedded PostgreSQL, which is fine for tasks that only run models.
    """
    base = {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "DJANGO_SETTINGS_MODULE": "engram_site.settings",
        "PYTHONUNBUFFERED": "1",
        "ENGRAM_EMBEDDED_PG_KEEP": "1",  # join the server's PostgreSQL, never stop it
    }
    if private_env is not None:
        return {**private_env, **base}, f"ENGRAM_HOME={private_env['ENGRAM_HOME']}"
    env = {**os.environ, **base}
    if home is not None:
        env.pop("DATABASE_URL", None)
        env["ENGRAM_HOME"] = str(home)
        return env, f"ENGRAM_HOME={home}"
    if os.environ.get("DATABASE_URL"):
        return env, "DATABASE_URL"
    env["DATABASE_URL"] = "postgresql://unused@127.0.0.1:9/no-database"
    nodb_home = Path(tempfile.gettempdir()) / "engram-bench-nodb"  # settings want a home (secret key)
    nodb_home.mkdir(exist_ok=True)
    env["ENGRAM_HOME"] = str(nodb_home)
    return env, "none"


def run_task(task: str, request: dict, env: dict[str, str], timeout: float = 6 * 3600) -> dict:
    """Run one task in a child process and return its JSON result."""
    with tempfile.TemporaryDirectory(prefix="engram-inproc-") as tmp:
        req, res = Path(tmp) / "request.json", Path(tmp) / "result.json"
        req.write_text(json.dumps(request))
        cmd = [sys.executable, str(BENCH_DIR / "inproc.py"), task, str(req), str(res)]
        proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, timeout=timeout, check=False)
        if proc.returncode != 0 or not res.exists():
            raise RuntimeError(f"in-process task {task!r} failed with status {proc.returncode} (see stderr above)")
        return json.loads(res.read_text())


# --------------------------------------------------------------------------------------------
# Child side
# --------------------------------------------------------------------------------------------


class StageClock:
    """Exclusive wall time per stage: a stage called inside another is subtracted from its parent.
    Nesting is tracked per thread; stages timed in different threads may overlap in time."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._local = threading.local()
        self._lock = threading.Lock()
        self.enabled = False

    def reset(self) -> None:
        with self._lock:
            self.seconds.clear()
            self.calls.clear()

    def measure(self, stage: str, call, *args, **kwargs):
        if not self.enabled:
            return call(*args, **kwargs)
        stack = self._local.__dict__.setdefault("stack", [])  # [stage, time spent in nested stages]
        started = time.perf_counter()
        stack.append([stage, 0.0])
        try:
            return call(*args, **kwargs)
        finally:
            _, nested = stack.pop()
            elapsed = time.perf_counter() - started
            with self._lock:
                self.seconds[stage] += elapsed - nested
                self.calls[stage] += 1
            if stack:
                stack[-1][1] += elapsed

    def wrap(self, stage: str, function):
        def wrapper(*args, **kwargs):
            return self.measure(stage, function, *args, **kwargs)

        wrapper.__wrapped__ = function
        return wrapper


def _setup_django() -> None:
    sys.path.insert(0, str(REPO_ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "engram_site.settings")
    import django

    django.setup()


def _memory_input(row: dict):
    from datetime import datetime

    from memories.services import MemoryInput

    fields = {k: v for k, v in row.items() if k in MemoryInput.__dataclass_fields__}
    if fields.get("created_at"):
        fields["created_at"] = datetime.fromisoformat(fields["created_at"].replace("Z", "+00:00"))
    return MemoryInput(**fields)


def _warm_models() -> None:
    from engram_site.providers import embedding, lemmatizer

    started = time.perf_counter()
    embedding.embed_texts(["warm up the embedding model", "and its buffers"] * 16)
    embedding.count_tokens(["warm up the tokenizer"])
    lemmatizer.lemmatize_many(["warm up the lemmatizer"])
    log(f"models loaded and warm in {time.perf_counter() - started:.1f}s")


def task_ingest_split(request: dict) -> dict:
    """memories_ingest on the given rows, one configuration per entry of ``runs``, with stage timers.

    request: {"rows": [...], "runs": [{"label", "bucket_id", "batch_size", "sequence", "single", "rows"}],
              "record_texts": label or None}
    """
    _setup_django()
    from django.db import connections

    import graph.receivers
    import memories.receivers
    from engram_site.providers import embedding, lemmatizer
    from engram_site.scoping import scopes_disabled, tenant_scope
    from memories.services.ingest import derived
    from memories.services.ingest import insert as services
    from tenants.models import Bucket

    _warm_models()
    clock = StageClock()
    counters = {"embedded_texts": 0, "context_texts": 0, "lemmatized_texts": 0}
    recorded: dict[str, list[str]] = {"content": [], "context": []}
    recording = {"on": False}
    original_embed, original_lemmatize = embedding.embed_texts, lemmatizer.lemmatize_many
    original_join = derived.join_context

    def counting_embed(texts, **kwargs):
        counters["embedded_texts"] += len(texts)
        return original_embed(texts, **kwargs)

    def counting_lemmatize(texts):
        counters["lemmatized_texts"] += len(texts)
        return original_lemmatize(texts)

    def counting_join(context_text, content):
        counters["context_texts"] += 1
        text = original_join(context_text, content)
        if recording["on"]:
            recorded["context"].append(text)
        return text

    # What memories_ingest reaches through module attributes, wrapped in this process only.
    # The model runs in a helper thread, a chunk ahead of the inserts: "embedding" is the time
    # the request thread waits for it, "model busy" the model's own time (overlapping the rest).
    embedding.embed_texts = clock.wrap("model busy", counting_embed)
    services._EmbeddingAhead.ready = clock.wrap("embedding", services._EmbeddingAhead.ready)
    embedding.count_tokens = clock.wrap("tokenizer", embedding.count_tokens)
    lemmatizer.lemmatize_many = clock.wrap("lemmatizing", counting_lemmatize)
    derived.join_context = counting_join
    memories.receivers.enqueue_enrichment = clock.wrap("queue hints", memories.receivers.enqueue_enrichment)
    graph.receivers.enqueue_extraction = clock.wrap("queue hints", graph.receivers.enqueue_extraction)
    conn = connections["default"]
    conn.commit = clock.wrap("database", conn.commit)

    def sql_timer(execute, sql, params, many, context):
        return clock.measure("database", execute, sql, params, many, context)

    rows = request["rows"]
    results = []
    # CPU of this process (the model's threads and the Python around them) and of the database
    # server (every process of it; only for one on this machine), per run: what the two cores did.
    with conn.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        backend_pid = cur.fetchone()[0]
    with conn.execute_wrapper(sql_timer):
        for run in request["runs"]:
            with scopes_disabled():  # the benchmark names a bucket of any tenant
                bucket = Bucket.objects.select_related("tenant").get(pk=run["bucket_id"])
            items = [_memory_input(r) for r in rows[: run["rows"]]]
            size = 1 if run["single"] else run["batch_size"]
            batches = [items[i : i + size] for i in range(0, len(items), size)]
            clock.reset()
            for key in counters:
                counters[key] = 0
            recording["on"] = run["label"] == request.get("record_texts")
            if recording["on"]:
                recorded["content"] = [item.content for item in items]
                recorded["context"] = []
            clock.enabled = True
            per_request = []
            cpu_before, database_before = time.process_time(), common.server_cpu_seconds(backend_pid)
            started = time.perf_counter()
            for batch in batches:
                t0 = time.perf_counter()
                with tenant_scope(bucket.tenant_id):  # as a request enters it
                    out = services.memories_ingest(bucket=bucket, items=batch, sequence=run["sequence"])
                per_request.append(time.perf_counter() - t0)
                if len(out) != len(batch):
                    raise RuntimeError("memories_ingest returned the wrong number of results")
            total = time.perf_counter() - started
            cpu = {"process": time.process_time() - cpu_before, "database": None}
            database_after = common.server_cpu_seconds(backend_pid)
            if database_before is not None and database_after is not None:
                cpu["database"] = database_after - database_before
            clock.enabled = False
            recording["on"] = False
            stages = {stage: clock.seconds.get(stage, 0.0) for stage in STAGES}
            stages["other (Python)"] = max(0.0, total - sum(stages.values()))
            stages["model busy"] = clock.seconds.get("model busy", 0.0)
            results.append(
                {
                    "label": run["label"],
                    "items": len(items),
                    "requests": len(batches),
                    "seconds": total,
                    "per_request": per_request,
                    "stages": stages,
                    "calls": dict(clock.calls),
                    "cpu": cpu,
                    **counters,
                }
            )
            log(
                f"{run['label']}: {len(items)} items in {total:.1f}s ({len(items) / total:.1f}/s); "
                + ", ".join(f"{k} {v:.1f}s" for k, v in stages.items())
            )
    return {"runs": results, "recorded": recorded}


def task_ceiling(request: dict) -> dict:
    """Raw throughput of embed_texts / lemmatize_many / count_tokens on the given texts.

    request: {"texts": {"content": [...], "context": [...]}, "repeat": n, "chunk": 1000, "batch_size": 64}
    """
    _setup_django()
    from engram_site.providers import embedding, lemmatizer

    _warm_models()
    chunk = int(request.get("chunk", 1000))
    batch_size = int(request.get("batch_size", 64))
    out: dict[str, Any] = {"embed": {}, "lemmatize": {}, "tokenize": {}, "batch_size": batch_size, "chunk": chunk}
    for kind, texts in request["texts"].items():
        if not texts:
            continue
        chunks = [texts[i : i + chunk] for i in range(0, len(texts), chunk)]
        for name, fn in (
            ("embed", lambda c: embedding.embed_texts(c, batch_size=batch_size)),
            ("lemmatize", lemmatizer.lemmatize_many),
            ("tokenize", embedding.count_tokens),
        ):
            runs, cpu = [], []
            for _ in range(int(request.get("repeat", 3))):
                started, cpu_before = time.perf_counter(), time.process_time()
                for c in chunks:
                    fn(c)
                runs.append(time.perf_counter() - started)
                cpu.append(time.process_time() - cpu_before)
            out[name][kind] = {"texts": len(texts), "seconds": runs, "cpu": cpu, "chars": sum(len(t) for t in texts)}
            best = len(texts) / sorted(runs)[len(runs) // 2]
            log(f"{name} {kind}: {len(texts)} texts, median {best:.1f} texts/s")
    out["runtime"] = embedding.runtime()
    out["cores"] = len(os.sched_getaffinity(0))
    return out


def task_embed_queries(request: dict) -> dict:
    """Time embed_query on each (distinct) text; optionally return the vectors.

    request: {"texts": [...], "return_vectors": bool}
    """
    _setup_django()
    from engram_site.providers import embedding

    _warm_models()
    # Warm the single-text path too (first call of a shape allocates).
    for text in ("a warm-up question?", "another warm-up question about a person?"):
        embedding.embed_texts([text])
    ms, vectors = [], []
    for text in request["texts"]:
        started = time.perf_counter()
        vector = embedding.embed_query(text)
        ms.append((time.perf_counter() - started) * 1000.0)
        if request.get("return_vectors"):
            vectors.append([float(x) for x in vector])
    torch_threads = None
    try:
        import torch

        torch_threads = torch.get_num_threads()
    except ImportError:
        pass
    return {"ms": ms, "vectors": vectors, "torch_threads": torch_threads, "runtime": embedding.runtime()}


def task_dsn(request: dict) -> dict:
    """psycopg connection parameters of the database Django is configured with."""
    _setup_django()
    from django.db import connections

    params = connections["default"].get_connection_params()
    keep = ("dbname", "user", "password", "host", "port", "connect_timeout")
    return {k: (str(v) if k == "port" else v) for k, v in params.items() if k in keep and v not in (None, "")}


def task_search_profile(request: dict) -> dict:
    """memories_search (what POST /search calls) on one bucket, each query ``repeat`` times: once
    plainly — per search, wall and CPU time of this process, the number of SQL statements and
    their time, the database server's CPU —, once under cProfile (the functions with the most own
    time), and once in detail: each statement by the function that ran it (count, wall time, the
    database backend's CPU), the query's embedding and the answer's serialisation (as the search
    view renders it), and ``EXPLAIN (ANALYZE, BUFFERS)`` of each statement of the first
    ``explain`` queries. The query-embedding cache is emptied before each pass, so every pass
    embeds every query once, as a server does for new questions.

    request: {"bucket_id", "queries": [...], "repeat": n, "ranking": {...} or None, "top": 30,
              "explain": 3}
    """
    import cProfile
    import pstats

    _setup_django()
    from django.conf import settings
    from django.db import connections
    from rest_framework.renderers import JSONRenderer

    from engram_site import stopwatch
    from engram_site.db import binding_cursor
    from engram_site.providers import embedding
    from engram_site.scoping import scopes_disabled, tenant_scope
    from memories.apis.search import _hit_json
    from memories.retrieval.search import memories_search
    from tenants.models import Bucket

    # Every signal in this thread: the profiler and the statement counter see one thread's
    # work only (the server runs the signals in a pool when ENGRAM_SEARCH_PARALLEL is on; the
    # work is the same, spread over threads).
    settings.ENGRAM_SEARCH_PARALLEL = False
    _warm_models()
    with scopes_disabled():  # the benchmark names a bucket of any tenant
        bucket = Bucket.objects.select_related("tenant").get(pk=request["bucket_id"])
    conn = connections["default"]
    statements = {"count": 0, "seconds": 0.0}

    def sql_counter(execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            statements["count"] += 1
            statements["seconds"] += time.perf_counter() - started

    queries = request["queries"]
    repeat = request.get("repeat", 1)
    ranking = request.get("ranking")

    def run_all(each=None) -> None:
        embedding._embed_query_cached.cache_clear()
        for _ in range(repeat):
            for query in queries:
                result = memories_search(bucket=bucket, query=query, ranking_overrides=ranking, record_access=False)
                if each is not None:
                    each(query, result)

    with tenant_scope(bucket.tenant_id), conn.execute_wrapper(sql_counter):
        for query in queries[:5]:  # warm: plans, caches, the first query embeddings
            memories_search(bucket=bucket, query=query, ranking_overrides=ranking, record_access=False)
        with conn.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            backend_pid = cur.fetchone()[0]
        statements.update(count=0, seconds=0.0)
        database_before = common.server_cpu_seconds(backend_pid)
        cpu_before, started = time.process_time(), time.perf_counter()
        run_all()
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu_before
        database_after = common.server_cpu_seconds(backend_pid)
        plain = {
            "searches": repeat * len(queries),
            "wall_s": wall,
            "cpu_s": cpu,
            "statements": statements["count"],
            "statement_s": statements["seconds"],
            "database_cpu_s": None if database_before is None or database_after is None
            else database_after - database_before,
        }  # fmt: skip
        profiler = cProfile.Profile()
        profiler.enable()
        run_all()
        profiler.disable()
    detail = _search_detail(request, bucket, conn, backend_pid, run_all, stopwatch, binding_cursor,
                            embedding, _hit_json, JSONRenderer)  # fmt: skip
    stats = pstats.Stats(profiler)
    total = stats.total_tt
    rows = []
    for (filename, line, name), (_cc, calls, tottime, cumtime, _callers) in stats.stats.items():
        rows.append({"function": f"{Path(filename).name}:{line} {name}", "file": filename, "calls": calls,
                     "own_s": tottime, "cumulative_s": cumtime})  # fmt: skip
    rows.sort(key=lambda r: r["own_s"], reverse=True)
    by_area: dict[str, float] = defaultdict(float)
    for r in rows:
        by_area[_area(r["file"])] += r["own_s"]
    return {
        "plain": plain,
        "detail": detail,
        "profiled_total_s": total,
        "top": rows[: request.get("top", 30)],
        "by_area": dict(sorted(by_area.items(), key=lambda kv: -kv[1])),
    }


# What names a statement beside the function that ran it: the first of these its text holds.
_STATEMENT_TAGS = (
    ("set_config('hnsw", "settings"),
    ("EXPLAIN (FORMAT JSON)", "planner estimate"),
    ("context_lemmatized IS NULL AND m.id = ANY", "context stand-ins"),
    ("context_tsv", "context"),
    ("k.tsv", "keys"),
    ("lemmatized_tsv", "memory"),
    ("AS MATERIALIZED (\n            SELECT m.id, m.context_embedding", "context, exact"),
    ("AS MATERIALIZED (\n            SELECT m.id, m.embedding", "memory, exact"),
    ("m.context_embedding <=>", "context, hnsw"),
    ("m.embedding <=>", "memory"),
)


def _statement_label(sql: str) -> str:
    """``module.function`` of the innermost Engram frame that ran the statement, and a tag."""
    frame = sys._getframe(2)
    name = fallback = "?"
    while frame is not None:
        path = frame.f_code.co_filename.replace("\\", "/")
        if "/site-packages/" not in path and "/bench/" not in path and "/lib/python" not in path:
            here = f"{Path(path).stem}.{frame.f_code.co_name}"
            if "/engram_site/" not in path:
                name = here
                break
            if fallback == "?":
                fallback = here
        frame = frame.f_back
    if name == "?":
        name = fallback
    for needle, tag in _STATEMENT_TAGS:
        if needle in sql:
            return f"{name} ({tag})"
    return name


def _plan_summary(plan: dict) -> str:
    """The plan's nodes, outermost first, as one line (index names kept)."""
    parts = []
    node = plan
    seen = 0
    stack = [plan]
    while stack and seen < 12:
        node = stack.pop(0)
        seen += 1
        label = node["Node Type"]
        if node.get("Index Name"):
            label += f" {node['Index Name']}"
        elif node.get("Relation Name"):
            label += f" {node['Relation Name']}"
        if node.get("Actual Loops", 1) > 1:
            label += f" x{node['Actual Loops']}"
        parts.append(label)
        stack[0:0] = node.get("Plans", [])
    return " > ".join(parts)


def _backend_cpu(pid: int) -> float | None:
    """CPU seconds of one PostgreSQL backend (cheap: one /proc file)."""
    fields = common._proc_stat(pid)
    return None if fields is None else common._ticks(fields) / os.sysconf("SC_CLK_TCK")


def _search_detail(request, bucket, conn, backend_pid, run_all, stopwatch, binding_cursor, embedding, hit_json,
                   renderer_class) -> dict:  # fmt: skip
    """Per statement label: count, wall, backend CPU; embedding and serialisation per search;
    EXPLAIN ANALYZE of the first ``explain`` queries' statements."""
    from engram_site.scoping import tenant_scope

    by_label: dict[str, dict] = defaultdict(lambda: {"count": 0, "wall_s": 0.0, "db_cpu_s": 0.0})
    captured: list[tuple[str, str, Any]] = []
    capture = {"on": False}

    def labelled(execute, sql, params, many, context):
        if capture.get("explaining"):
            return execute(sql, params, many, context)
        label = _statement_label(sql)
        cpu = _backend_cpu(backend_pid)
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            entry = by_label[label]
            entry["count"] += 1
            entry["wall_s"] += time.perf_counter() - started
            after = _backend_cpu(backend_pid)
            if cpu is not None and after is not None:
                entry["db_cpu_s"] += after - cpu
            if capture["on"]:
                captured.append((label, sql, params))

    totals = {"embed_wall_s": 0.0, "embed_cpu_s": 0.0, "serialise_cpu_s": 0.0, "searches": 0, "hits": 0,
              "cpu_s": 0.0, "wall_s": 0.0}  # fmt: skip
    renderer = renderer_class()

    def each(query, result):
        started = time.thread_time()
        body = {"mode_used": result.mode_used, "results": [hit_json(h, False) for h in result.hits],
                "warnings": result.warnings, "total_tokens": 0}  # fmt: skip
        renderer.render(body)
        totals["serialise_cpu_s"] += time.thread_time() - started
        totals["hits"] += len(result.hits)

    with tenant_scope(bucket.tenant_id), conn.execute_wrapper(labelled):
        watch_cm = stopwatch.running()
        watch = watch_cm.__enter__()
        try:
            cpu_before, started = time.process_time(), time.perf_counter()
            run_all(each)
            totals["cpu_s"], totals["wall_s"] = time.process_time() - cpu_before, time.perf_counter() - started
        finally:
            watch_cm.__exit__(None, None, None)
        embed = watch.laps.get("embed")
        if embed is not None:
            totals["embed_wall_s"], totals["embed_cpu_s"], totals["embed_calls"] = embed.wall, embed.cpu, embed.count
        totals["searches"] = len(request["queries"]) * request.get("repeat", 1)
        # EXPLAIN ANALYZE of each statement of a few searches (after a plain run of each, so
        # the session settings are those the statements ran under).
        plans: dict[str, list] = defaultdict(list)
        from memories.retrieval.search import memories_search

        for query in request["queries"][: request.get("explain", 3)]:
            captured.clear()
            capture["on"] = True
            memories_search(bucket=bucket, query=query, ranking_overrides=request.get("ranking"), record_access=False)
            capture["on"] = False
            capture["explaining"] = True
            for label, sql, params in list(captured):
                if "set_config" in sql or sql.lstrip().startswith("EXPLAIN"):
                    continue
                with binding_cursor(conn) as cur:
                    cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
                    plan = cur.fetchone()[0]
                if isinstance(plan, str):
                    plan = json.loads(plan)
                top = plan[0]
                shared = top["Plan"].get("Shared Hit Blocks", 0) + top["Plan"].get("Shared Read Blocks", 0)
                plans[label].append({"planning_ms": top.get("Planning Time"), "execution_ms": top.get("Execution Time"),
                                     "buffers": shared, "rows": top["Plan"].get("Actual Rows"),
                                     "plan": _plan_summary(top["Plan"])})  # fmt: skip
            capture["explaining"] = False
    return {"statements": {k: dict(v) for k, v in by_label.items()}, "totals": totals, "plans": dict(plans)}


def _area(filename: str) -> str:
    """Where a profiled function lives, coarsely: Engram's own apps, or the library."""
    path = filename.replace("\\", "/")
    if "/site-packages/" in path:
        library = path.split("/site-packages/", 1)[1].split("/", 1)[0]
        return f"library: {library}"
    for app in ("memories/retrieval", "memories", "engram_site", "tenants", "graph", "maintenance"):
        if f"/{app}/" in path:
            return f"engram: {app}"
    if path.startswith("<") or "/lib/python" in path:
        return "Python runtime"
    return "other"


TASKS = {
    "ingest-split": task_ingest_split,
    "ceiling": task_ceiling,
    "embed-queries": task_embed_queries,
    "dsn": task_dsn,
    "search-profile": task_search_profile,
}


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in TASKS:
        print(f"usage: inproc.py {{{','.join(TASKS)}}} REQUEST.json RESULT.json", file=sys.stderr)
        return 2
    task, request_path, result_path = argv
    request = json.loads(Path(request_path).read_text())
    result = TASKS[task](request)
    Path(result_path).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
