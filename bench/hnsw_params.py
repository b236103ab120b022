"""HNSW build parameters side by side: recall@10, the insert's database CPU and the walk's time.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/hnsw_params.py --params 16/128,12/128,12/160
    HF_HUB_OFFLINE=1 .venv/bin/python bench/hnsw_params.py --source docstrings --params 16/128,12/160

Each ``m/ef_construction`` pair is measured on the same vectors, in a scratch table of the
database of ``--home`` (its embedded PostgreSQL; ``DATABASE_URL`` for another server), never in
Engram's own tables:

* the vectors: ``--rows`` texts embedded with ``memories.embedding.embed_texts`` (the server's
  model and runtime) and cached in ``bench/data/``; ``--source corpus`` takes the ``content`` of
  ``bench/make_corpus.py``'s rows and its questions as queries, ``--source docstrings`` the
  sentences of the installed packages' docstrings (other English, longer and more varied), with
  held-out sentences as queries;
* **build**: all rows but the last ``--insert-rows`` into a table, then ``CREATE INDEX ... USING
  hnsw ((v::halfvec(384)) halfvec_cosine_ops)`` as Engram's indexes are declared
  (``--incremental``: the index first, then the rows in statements of 1000, as a service fills it);
* **insert**: the last ``--insert-rows`` rows in statements of 250 rows; the database backend's
  CPU (from ``/proc``, so only for a server on this machine) per 1000 rows;
* **recall@10** of ``ORDER BY v::halfvec(384) <=> q LIMIT 10`` at each ``--ef`` against the exact
  top 10 (cosine over the 32-bit vectors, in numpy), and the median time of that statement;
  **filtered**, the same with ``WHERE part = 0`` (one row in ``--filter-parts``) and
  ``hnsw.iterative_scan = relaxed_order``, as the server walks with filters.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import re
import statistics
import sys
import time
from pathlib import Path

import common
import numpy as np
from hnsw_recall import to_pgvector

DATA_DIR = common.REPO_ROOT / "bench" / "data"
TABLE = "bench_hnsw_vectors"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", choices=("corpus", "docstrings"), default="corpus")
    p.add_argument("--corpus", type=Path, default=DATA_DIR / "corpus-100k.jsonl", help="make_corpus.py rows")
    p.add_argument("--queries-file", type=Path, default=DATA_DIR / "queries-prof.jsonl", help="its questions")
    p.add_argument("--rows", type=int, default=100_000, help="vectors in the table (default 100000)")
    p.add_argument("--queries", type=int, default=400, help="query vectors (default 400)")
    p.add_argument("--insert-rows", type=int, default=2000, help="rows inserted into the built index (default 2000)")
    p.add_argument("--params", default="16/128,12/160", help="m/ef_construction pairs, comma-separated")
    p.add_argument("--ef", default="40,100,200", help="hnsw.ef_search values")
    p.add_argument("--filter-parts", type=int, default=10, help="the filtered walk keeps 1 row in N (default 10)")
    p.add_argument("--incremental", action="store_true", help="build by inserts instead of CREATE INDEX")
    p.add_argument("--home", type=Path, default=DATA_DIR / "hnsw-params-home", help="ENGRAM_HOME of the database")
    p.add_argument("--out", type=Path, default=None, help="report path (default bench/results/hnsw-params-<date>.md)")
    return p.parse_args(argv)


def _docstring_sentences(limit: int) -> list[str]:
    """Sentences of 40-250 characters from the docstrings of the installed packages, shuffled (seed 1)."""
    roots = sorted({Path(p) for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()})
    split = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
    seen: set[str] = set()
    out: list[str] = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            try:
                tree = ast.parse(path.read_text(errors="ignore"))
            except (SyntaxError, ValueError, OSError):
                continue
            for node in ast.walk(tree):
                if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for paragraph in re.split(r"\n\s*\n", ast.get_docstring(node) or ""):
                    for sentence in split.split(" ".join(paragraph.split())):
                        prose = sum(ch.isalpha() or ch == " " for ch in sentence) >= 0.9 * len(sentence)
                        if 40 <= len(sentence) <= 250 and prose and sentence.lower() not in seen:
                            seen.add(sentence.lower())
                            out.append(sentence)
    random.Random(1).shuffle(out)
    if len(out) < limit:
        raise SystemExit(f"only {len(out)} docstring sentences here, {limit} needed")
    return out[:limit]


def _texts(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    if args.source == "docstrings":
        sentences = _docstring_sentences(args.rows + args.queries)
        return sentences[: args.rows], sentences[args.rows :]
    if not args.corpus.exists():
        raise SystemExit(f"{args.corpus} is missing: make it with bench/make_corpus.py (bench/README.md)")
    rows = []
    with args.corpus.open() as f:
        for line in f:
            rows.append(json.loads(line)["content"])
            if len(rows) == args.rows:
                break
    with args.queries_file.open() as f:
        queries = [json.loads(line)["query"] for line in f][: args.queries]
    if len(rows) < args.rows or len(queries) < args.queries:
        raise SystemExit(f"{args.corpus} or {args.queries_file} has fewer rows than asked for")
    return rows, queries


def _vectors(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray]:
    """Rows and queries embedded by the server's model, cached by source and size."""
    cache = DATA_DIR / f"hnsw-params-{args.source}-{args.rows}-{args.queries}.npz"
    if cache.exists():
        saved = np.load(cache)
        return saved["rows"], saved["queries"]
    from memories import embedding

    rows, queries = _texts(args)
    started = time.perf_counter()
    if args.source == "corpus":  # questions, embedded as the server embeds a search's query
        query_vectors = np.stack([embedding.embed_query(q) for q in queries]).astype(np.float32)
    else:
        query_vectors = embedding.embed_texts(queries).astype(np.float32)
    row_vectors = embedding.embed_texts(rows).astype(np.float32)
    common.log(f"embedded {len(rows)} rows and {len(queries)} queries in {time.perf_counter() - started:.0f}s")
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez(cache, rows=row_vectors, queries=query_vectors)
    return row_vectors, query_vectors


def _backend_cpu(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None  # a server on another machine
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _measure(cur, pid: int, m: int, ef_construction: int, args, literals: list[str], exact: dict, queries) -> dict:
    built = len(literals) - args.insert_rows
    cur.execute(f"DROP TABLE IF EXISTS {TABLE}")
    cur.execute(f"CREATE TABLE {TABLE} (id integer PRIMARY KEY, part integer NOT NULL, v vector(384))")
    index = (
        f"CREATE INDEX {TABLE}_hnsw ON {TABLE} USING hnsw ((v::halfvec(384)) halfvec_cosine_ops) "
        f"WITH (m = {m}, ef_construction = {ef_construction})"
    )

    def insert(start: int, stop: int, step: int) -> None:
        for first in range(start, stop, step):
            ids = range(first, min(first + step, stop))
            cur.execute(
                f"INSERT INTO {TABLE} (id, part, v) VALUES " + ",".join(["(%s, %s, %s::vector)"] * len(ids)),
                [value for i in ids for value in (i, i % args.filter_parts, literals[i])],
            )

    started = time.perf_counter()
    if args.incremental:
        cur.execute(index)
        insert(0, built, 1000)
    else:
        insert(0, built, 1000)
        started = time.perf_counter()
        cur.execute(index)
    build_s = time.perf_counter() - started
    cur.execute("CHECKPOINT")
    cpu_before, started = _backend_cpu(pid), time.perf_counter()
    insert(built, len(literals), 250)
    insert_wall = time.perf_counter() - started
    cpu_after = _backend_cpu(pid)
    cur.execute(f"SELECT pg_relation_size('{TABLE}_hnsw')")
    result = {
        "m": m,
        "ef_construction": ef_construction,
        "build_s": build_s,
        "index_mb": cur.fetchone()[0] / 2**20,
        "insert_wall_per_1000": insert_wall / args.insert_rows * 1000,
        "insert_cpu_per_1000": (
            (cpu_after - cpu_before) / args.insert_rows * 1000 if cpu_before is not None else float("nan")
        ),
    }
    cur.execute("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', false)")
    for kind, where in (("", ""), ("filtered_", "WHERE part = 0")):
        for ef in [int(x) for x in args.ef.split(",")]:
            cur.execute("SELECT set_config('hnsw.ef_search', %s, false)", [str(ef)])
            found, seconds = 0, []
            for q, query in enumerate(queries):
                started = time.perf_counter()
                cur.execute(
                    f"SELECT id FROM {TABLE} {where} ORDER BY v::halfvec(384) <=> %s::halfvec(384) LIMIT 10", [query]
                )
                ids = {row[0] for row in cur.fetchall()}
                seconds.append(time.perf_counter() - started)
                found += len(ids & exact[kind][q])
            result[f"{kind}recall_ef{ef}"] = found / (10 * len(queries))
            result[f"{kind}ms_ef{ef}"] = statistics.median(seconds) * 1000
    cur.execute(f"DROP TABLE {TABLE}")
    common.log(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in result.items()}))
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    pairs = [tuple(int(x) for x in pair.split("/")) for pair in args.params.split(",")]
    if not os.environ.get("DATABASE_URL"):
        args.home.mkdir(parents=True, exist_ok=True)
        os.environ["ENGRAM_HOME"] = str(args.home)
    sys.path.insert(0, str(common.REPO_ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "engram_site.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)  # the vector extension
    rows, queries = _vectors(args)
    unit_rows = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    unit_queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    similarities = unit_queries @ unit_rows.T
    exact = {"": [set(np.argsort(-row)[:10].tolist()) for row in similarities]}
    kept = np.arange(len(rows)) % args.filter_parts == 0  # WHERE part = 0
    similarities[:, ~kept] = -np.inf
    exact["filtered_"] = [set(np.argsort(-row)[:10].tolist()) for row in similarities]
    literals = [to_pgvector(v) for v in rows]
    query_literals = [to_pgvector(v) for v in queries]
    results = []
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
        cur.execute("SET max_parallel_maintenance_workers = 1")
        for m, ef_construction in pairs:
            results.append(_measure(cur, pid, m, ef_construction, args, literals, exact, query_literals))
    efs = args.ef.split(",")
    table = common.markdown_table(
        [
            "m / ef_construction",
            *(f"recall@10, ef_search {ef}" for ef in efs),
            *(f"walk ms, ef_search {ef}" for ef in efs),
            *(f"filtered recall@10, ef_search {ef}" for ef in efs),
            *(f"filtered walk ms, ef_search {ef}" for ef in efs),
            "insert: database CPU s per 1000 rows",
            "build s",
            "index MB",
        ],
        [
            [
                f"{r['m']} / {r['ef_construction']}",
                *(f"{r[f'recall_ef{ef}']:.4f}" for ef in efs),
                *(f"{r[f'ms_ef{ef}']:.2f}" for ef in efs),
                *(f"{r[f'filtered_recall_ef{ef}']:.4f}" for ef in efs),
                *(f"{r[f'filtered_ms_ef{ef}']:.2f}" for ef in efs),
                f"{r['insert_cpu_per_1000']:.2f}",
                f"{r['build_s']:.1f}",
                f"{r['index_mb']:.1f}",
            ]
            for r in results
        ],
    )
    source = (
        f"`{args.corpus.name}` (make_corpus.py), questions from `{args.queries_file.name}`"
        if args.source == "corpus"
        else "sentences of the installed packages' docstrings, held-out sentences as queries"
    )
    report = "\n".join(
        [
            f"# HNSW build parameters, {args.rows:,} vectors ({args.source})",
            "",
            common.machine_markdown(),
            "",
            f"Command: `{common.command_line()}`",
            "",
            f"Vectors: {args.rows:,} texts, {source}; {len(queries)} queries; the server's embedding model. "
            f"Built {'by inserts of 1000 rows' if args.incremental else 'with CREATE INDEX'} over "
            f"{args.rows - args.insert_rows:,} rows, then {args.insert_rows:,} rows inserted in statements of 250. "
            "Recall@10 against exact cosine top 10; walk = one `ORDER BY ... LIMIT 10` statement, client side, median; "
            f"filtered: `WHERE part = 0` keeps 1 row in {args.filter_parts}, iterative scan `relaxed_order`.",
            "",
            table,
        ]
    )
    common.write_report(report, args.out or common.default_report_path(f"hnsw-params-{args.source}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
