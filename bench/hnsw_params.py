"""HNSW build parameters side by side: recall@10, the insert's database CPU and the walk's time.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/hnsw_params.py --params 16/128,12/128,12/160
    HF_HUB_OFFLINE=1 .venv/bin/python bench/hnsw_params.py --source docstrings --params 16/128,12/160

Each ``m/ef_construction`` pair is measured on the same vectors, in a scratch table of the
database of ``--home`` (its embedded PostgreSQL; ``DATABASE_URL`` for another server), never in
Engram's own tables:

* the vectors: ``--rows`` texts embedded with ``engram_site.providers.embedding.embed_texts`` (the server's
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
  ``hnsw.iterative_scan = relaxed_order``, as the server walks with filters;
* **the misses**: per query, how much similarity the walk's ten give up against the true ten,
  so a query with low recall can be told apart from one that found near-ties;
* **sizes**: ``--rows 250000,500000,1000000`` measures each size in turn on prefixes of the same
  vectors (embedded once, for the largest), and ``--ef grown`` is the ``ef_search`` the server
  uses at each size (its default grown with the graph past 100k vectors).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/hnsw_params.py --corpus bench/data/corpus-1m.jsonl \
        --queries-file bench/data/queries-1m.jsonl --rows 100000,250000,500000,1000000 \
        --params 12/160 --ef 100,200,400,grown
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
    p.add_argument(
        "--queries-file",
        type=Path,
        default=DATA_DIR / "queries-100k.jsonl",
        help="its questions (make_corpus.py --queries 500 --queries-out ...)",
    )
    p.add_argument(
        "--rows",
        default="100000",
        help="vectors in the table (default 100000); several sizes, comma-separated, are measured one after "
        "another on prefixes of the same vectors",
    )
    p.add_argument("--queries", type=int, default=400, help="query vectors (default 400)")
    p.add_argument("--insert-rows", type=int, default=2000, help="rows inserted into the built index (default 2000)")
    p.add_argument("--params", default="16/128,12/160", help="m/ef_construction pairs, comma-separated")
    p.add_argument(
        "--ef",
        default="40,100,200",
        help="hnsw.ef_search values; 'grown' is the server's own at each size (the default ef_search grown with "
        "the graph, memories.retrieval.scaled_ef_search)",
    )
    p.add_argument("--filter-parts", type=int, default=10, help="the filtered walk keeps 1 row in N (default 10)")
    p.add_argument("--incremental", action="store_true", help="build by inserts instead of CREATE INDEX")
    p.add_argument("--home", type=Path, default=DATA_DIR / "hnsw-params-home", help="ENGRAM_HOME of the database")
    p.add_argument("--out", type=Path, default=None, help="report path (default bench/results/hnsw-params-<date>.md)")
    args = p.parse_args(argv)
    try:
        args.sizes = sorted({int(size) for size in args.rows.split(",")})
    except ValueError:
        p.error("--rows takes whole numbers, comma-separated")
    if args.sizes[0] <= args.insert_rows:
        p.error("every --rows size must be larger than --insert-rows")
    args.rows = args.sizes[-1]
    args.ef_labels = [label.strip() for label in args.ef.split(",") if label.strip()]
    if not all(label == GROWN or label.isdigit() for label in args.ef_labels):
        p.error(f"--ef takes whole numbers and '{GROWN}'")
    return args


GROWN = "grown"


def ef_values(args: argparse.Namespace, size: int) -> dict[str, int]:
    """``--ef`` labels and the ef_search each stands for with ``size`` vectors in the graph."""
    from memories import ranking
    from memories.retrieval import scaled_ef_search

    grown = scaled_ef_search(ranking.DEFAULTS.ef_search, size)
    return {label: grown if label == GROWN else int(label) for label in args.ef_labels}


def _exact_top10(
    unit_queries: np.ndarray, unit_rows: np.ndarray, kept: np.ndarray
) -> dict[str, list[tuple[set[int], float]]]:
    """Each query's exact top 10 by cosine and their summed similarity, over every row and over
    the rows ``kept`` (the filter)."""
    similarities = unit_queries @ unit_rows.T

    def top10(matrix: np.ndarray) -> list[tuple[set[int], float]]:
        tops = []
        for row in matrix:
            best = np.argpartition(-row, 10)[:10]
            tops.append((set(best.tolist()), float(row[best].sum())))
        return tops

    exact = {"": top10(similarities)}
    similarities[:, ~kept] = -np.inf
    exact["filtered_"] = top10(similarities)
    return exact


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
    if not args.queries_file.exists():
        raise SystemExit(
            f"{args.queries_file} is missing: make it with bench/make_corpus.py and the corpus's own arguments "
            "plus --queries 500 --queries-out (bench/README.md)"
        )
    with args.queries_file.open() as f:
        queries = [json.loads(line)["query"] for line in f][: args.queries]
    if len(rows) < args.rows or len(queries) < args.queries:
        raise SystemExit(f"{args.corpus} or {args.queries_file} has fewer rows than asked for")
    return rows, queries


def _vectors(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray]:
    """Rows and queries embedded by the server's model, cached by source (and corpus) and size. A cache
    of more rows of the same texts serves too: the rows are always the source's first ones."""
    name = args.source if args.source == "docstrings" else f"corpus-{args.corpus.stem}-{args.queries_file.stem}"
    cache = DATA_DIR / f"hnsw-params-{name}-{args.rows}-{args.queries}.npz"
    pattern = re.compile(rf"hnsw-params-{re.escape(name)}-(\d+)-{args.queries}\.npz")
    larger = sorted(
        (int(match.group(1)), path)
        for path in DATA_DIR.glob(f"hnsw-params-{name}-*.npz")
        if (match := pattern.fullmatch(path.name)) and int(match.group(1)) >= args.rows
    )
    if args.source == "docstrings":  # the held-out queries follow the rows: only the same size serves
        larger = [(size, path) for size, path in larger if size == args.rows]
    if larger:
        saved = np.load(larger[0][1])
        return saved["rows"][: args.rows], saved["queries"]
    from engram_site.providers import embedding

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


def _measure(
    cur, pid: int, m: int, ef_construction: int, args, literals: list[str], exact: dict, queries, unit
) -> dict:
    """Build, insert into and walk one graph over ``literals`` (one size); ``exact``: its true top 10s;
    ``unit``: the normalised query and row vectors."""
    unit_queries, unit_rows = unit
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
    cpu_before, started = common.process_cpu_seconds(pid), time.perf_counter()
    insert(built, len(literals), 250)
    insert_wall = time.perf_counter() - started
    cpu_after = common.process_cpu_seconds(pid)
    cur.execute(f"SELECT pg_relation_size('{TABLE}_hnsw')")
    efs = ef_values(args, len(literals))
    result = {
        "vectors": len(literals),
        "efs": efs,
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
        for label, ef in efs.items():
            cur.execute("SELECT set_config('hnsw.ef_search', %s, false)", [str(ef)])
            seconds, recalls, lost = [], [], []
            for q, query in enumerate(queries):
                started = time.perf_counter()
                cur.execute(
                    f"SELECT id FROM {TABLE} {where} ORDER BY v::halfvec(384) <=> %s::halfvec(384) LIMIT 10", [query]
                )
                ids = {row[0] for row in cur.fetchall()}
                seconds.append(time.perf_counter() - started)
                truth, best = exact[kind][q]
                recalls.append(len(ids & truth) / 10)
                # How much worse the walk's ten are than the true ten: the similarity given up,
                # per result (near 0 when the misses were near-ties of the true ones).
                got = float((unit_rows[sorted(ids)] @ unit_queries[q]).sum()) if ids else 0.0
                lost.append((best - got) / 10)
            result[f"{kind}recall_ef{label}"] = statistics.mean(recalls)
            result[f"{kind}lowest_ef{label}"] = min(recalls)
            result[f"{kind}lost_ef{label}"] = statistics.mean(lost)
            result[f"{kind}low_ef{label}"] = sum(1 for recall in recalls if recall <= 0.5)
            result[f"{kind}lost_low_ef{label}"] = max(
                (gap for gap, recall in zip(lost, recalls, strict=True) if recall <= 0.5), default=float("nan")
            )
            result[f"{kind}ms_ef{label}"] = statistics.median(seconds) * 1000
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

    from memories import ranking, retrieval

    call_command("migrate", verbosity=0)  # the vector extension
    rows, queries = _vectors(args)
    unit_rows = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    unit_queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    kept = np.arange(len(rows)) % args.filter_parts == 0  # WHERE part = 0
    literals = [to_pgvector(v) for v in rows]
    query_literals = [to_pgvector(v) for v in queries]
    results = []
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
        cur.execute("SET max_parallel_maintenance_workers = 1")
        # A graph of a million vectors (~1 GB) does not fit in the embedded server's 512 MB, and a
        # build past that point goes on on disk, many times slower; the graph itself is the same.
        cur.execute("SET maintenance_work_mem = '4GB'")
        for size in args.sizes:
            exact = _exact_top10(unit_queries, unit_rows[:size], kept[:size])
            for m, ef_construction in pairs:
                results.append(
                    _measure(
                        cur,
                        pid,
                        m,
                        ef_construction,
                        args,
                        literals[:size],
                        exact,
                        query_literals,
                        (unit_queries, unit_rows[:size]),
                    )
                )
    efs = args.ef_labels
    grown = GROWN in efs
    table = common.markdown_table(
        [
            *(["vectors"] if len(args.sizes) > 1 else []),
            "m / ef_construction",
            *([f"{GROWN} ef_search"] if grown else []),
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
                *([f"{r['vectors']:,}"] if len(args.sizes) > 1 else []),
                f"{r['m']} / {r['ef_construction']}",
                *([str(r["efs"][GROWN])] if grown else []),
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
    misses = common.markdown_table(
        [
            "vectors",
            "m / ef_construction",
            "walk",
            "ef_search",
            "recall@10",
            "lowest",
            "queries at <= 0.5",
            "similarity given up per result, mean",
            "the same, worst of the queries at <= 0.5",
        ],
        [
            [
                f"{r['vectors']:,}",
                f"{r['m']} / {r['ef_construction']}",
                "filtered" if kind else "unfiltered",
                f"{r['efs'][ef]}" + (f" ({GROWN})" if ef == GROWN else ""),
                f"{r[f'{kind}recall_ef{ef}']:.4f}",
                f"{r[f'{kind}lowest_ef{ef}']:.1f}",
                str(r[f"{kind}low_ef{ef}"]),
                f"{r[f'{kind}lost_ef{ef}']:.5f}",
                "—" if np.isnan(r[f"{kind}lost_low_ef{ef}"]) else f"{r[f'{kind}lost_low_ef{ef}']:.4f}",
            ]
            for r in results
            for kind in ("", "filtered_")
            for ef in efs
        ],
    )
    source = (
        f"`{args.corpus.name}` (make_corpus.py), questions from `{args.queries_file.name}`"
        if args.source == "corpus"
        else "sentences of the installed packages' docstrings, held-out sentences as queries"
    )
    report = "\n".join(
        [
            f"# HNSW build parameters, {' / '.join(f'{size:,}' for size in args.sizes)} vectors ({args.source})",
            "",
            common.machine_markdown(),
            "",
            f"Command: `{common.command_line()}`",
            "",
            f"Vectors: the first {' / '.join(f'{size:,}' for size in args.sizes)} texts, {source}; "
            f"{len(queries)} queries; the server's embedding model. "
            f"Built {'by inserts of 1000 rows' if args.incremental else 'with CREATE INDEX'} over all but the "
            f"last {args.insert_rows:,} rows, then those inserted in statements of 250. "
            "Recall@10 against exact cosine top 10; walk = one `ORDER BY ... LIMIT 10` statement, client side, median; "
            f"filtered: `WHERE part = 0` keeps 1 row in {args.filter_parts}, iterative scan `relaxed_order`."
            + (
                f" `{GROWN}`: the ef_search the server walks a graph of that many vectors with by default "
                f"(ef_search {ranking.DEFAULTS.ef_search} grown past {retrieval.EF_GROWS_FROM:,} vectors: "
                "memories.retrieval.scaled_ef_search)."
                if grown
                else ""
            ),
            "",
            table,
            "",
            "## The misses",
            "",
            "Per query: recall@10, and the similarity the walk's ten give up against the true ten "
            "((sum of the true ten's cosine similarities - sum of the walk's) / 10, over the 32-bit vectors). "
            "A query with low recall whose ten give up almost nothing found near-ties of the true ten.",
            "",
            misses,
        ]
    )
    # Recall@10 and walk time at the first ef_search, per size and build parameters.
    first = efs[0]
    headline = f"recall@10 at ef_search {first} (walk ms): " + "; ".join(
        f"{r['vectors']:,} vectors, {r['m']}/{r['ef_construction']}: {r[f'recall_ef{first}']:.3f} "
        f"({r[f'ms_ef{first}']:.2f})"
        for r in results
    )
    header = common.report_header(__file__, headline, series=args.source)
    common.write_report(report, args.out or common.default_report_path(f"hnsw-params-{args.source}"), header=header)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
